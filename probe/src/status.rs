//! Capabilities, no_new_privs and the seccomp mode, from /proc/self/status.

use crate::report::Check;

/// A field's value in status text (`Key:\tvalue`).
pub fn field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k == key).then(|| v.trim())
    })
}

/// A capability mask field as a number.
fn mask(status: &str, key: &str) -> Option<u64> {
    u64::from_str_radix(field(status, key)?, 16).ok()
}

/// caps: CapEff, CapPrm, CapAmb and CapBnd all 0 (nothing held, nothing
/// that an exec could bring back). nnp: NoNewPrivs 1. seccomp: mode 2
/// (a filter).
pub fn checks(status: Option<&str>) -> Vec<Check> {
    let Some(status) = status else {
        let why = "cannot read /proc/self/status";
        return vec![
            Check::new("caps", false, why),
            Check::new("nnp", false, why),
            Check::new("seccomp", false, why),
        ];
    };
    let keys = ["CapEff", "CapPrm", "CapAmb", "CapBnd"];
    let masks: Vec<Option<u64>> = keys.iter().map(|k| mask(status, k)).collect();
    let caps_seen = keys
        .iter()
        .zip(&masks)
        .map(|(k, m)| match m {
            Some(m) => format!("{k} {m:016x}"),
            None => format!("{k} unreadable"),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let caps = Check::new("caps", masks.iter().all(|m| *m == Some(0)), caps_seen);
    let nnp = field(status, "NoNewPrivs");
    let nnp = Check::new(
        "nnp",
        nnp == Some("1"),
        format!("NoNewPrivs {}", nnp.unwrap_or("absent")),
    );
    let mode = field(status, "Seccomp");
    let filters = field(status, "Seccomp_filters");
    let seen = match (mode, filters) {
        (Some(m), Some(f)) => format!("Seccomp {m}, {f} filter(s)"),
        (Some(m), None) => format!("Seccomp {m}"),
        (None, _) => "Seccomp absent".to_string(),
    };
    let seccomp = Check::new("seccomp", mode == Some("2"), seen);
    vec![caps, nnp, seccomp]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Verdict;

    const RUNC: &str = "Name:\tprobe\nUmask:\t0022\nState:\tR (running)\nCapInh:\t0000000000000000\nCapPrm:\t00000000a80425fb\nCapEff:\t00000000a80425fb\nCapBnd:\t00000000a80425fb\nCapAmb:\t0000000000000000\nNoNewPrivs:\t0\nSeccomp:\t2\nSeccomp_filters:\t1\n";
    const CONFINED: &str = "CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t2\n";

    fn verdicts(text: Option<&str>) -> Vec<Verdict> {
        checks(text).iter().map(|c| c.verdict).collect()
    }

    #[test]
    fn runcs_defaults_keep_capabilities_and_new_privileges() {
        assert_eq!(
            verdicts(Some(RUNC)),
            [Verdict::Fail, Verdict::Fail, Verdict::Pass]
        );
        assert!(checks(Some(RUNC))[0]
            .observed
            .contains("CapEff 00000000a80425fb"));
    }

    #[test]
    fn a_confined_process_holds_every_rule() {
        assert_eq!(verdicts(Some(CONFINED)), [Verdict::Pass; 3]);
        assert_eq!(checks(Some(CONFINED))[2].observed, "Seccomp 2, 2 filter(s)");
    }

    #[test]
    fn a_bounding_set_alone_fails_caps() {
        let text = CONFINED.replace("CapBnd:\t0000000000000000", "CapBnd:\t0000000000000400");
        assert_eq!(checks(Some(&text))[0].verdict, Verdict::Fail);
    }

    #[test]
    fn no_filter_or_no_status_fails() {
        let text = CONFINED.replace("Seccomp:\t2", "Seccomp:\t0");
        assert_eq!(checks(Some(&text))[2].verdict, Verdict::Fail);
        let text = CONFINED.replace("NoNewPrivs:\t1\n", "");
        assert_eq!(checks(Some(&text))[1].observed, "NoNewPrivs absent");
        assert_eq!(verdicts(None), [Verdict::Fail; 3]);
    }
}
