//! `checkpoint`: runc and CRIU, as root in the host's namespaces, dump the
//! container's memory to `--image-path` (made with MkdirAll), logs to
//! `--work-path`, and read (with `--auto-dedup`, punch holes in) the parent
//! images at `--parent-path`. Refused unless `[runtime] allow_checkpoint`;
//! then each of those paths must lie below `[runtime] checkpoint_dirs` and
//! reaches runc resolved. `--page-server` and `--lazy-pages` (a page server
//! that CRIU serves from the host's network namespace) are refused.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use vibe_policy::Denial;

use super::host_paths::{arg, checkpoint_dir, go_clean};
use super::{lossy, refusal, Ctx, Outcome};
use crate::runc_argv::{CheckpointArgs, Edits, Item};

pub fn prepare(ctx: &Ctx, args: &[OsString], parsed: &CheckpointArgs) -> Outcome {
    Outcome {
        container_id: lossy(&parsed.id),
        result: judge(ctx, args, parsed).map(|args| (args, Vec::new())),
        notice: None,
        assurance: None,
    }
}

fn judge(
    ctx: &Ctx,
    args: &[OsString],
    parsed: &CheckpointArgs,
) -> Result<Vec<OsString>, vibe_policy::Refusal> {
    let items = &parsed.items;
    let runtime = &ctx.policy.runtime;
    if !runtime.allow_checkpoint {
        return Err(refusal(Denial::new(
            "checkpoint",
            "[runtime] allow_checkpoint",
            "false",
            "runc checkpoint makes runc and CRIU write the container's memory to host paths argv names, as root",
        )));
    }
    for (flag, given) in [
        ("page-server", parsed.page_server),
        ("lazy-pages", parsed.lazy_pages),
    ] {
        if given {
            return Err(refusal(Denial::new(
                "checkpoint",
                format!("--{flag}"),
                "",
                "CRIU would serve or send the container's memory over the host's network namespace",
            )));
        }
    }
    let dirs = &runtime.checkpoint_dirs;
    let mut edits = Edits::default();
    // runc's default image path is ./checkpoint: name it, absolute.
    let Some(image) = &parsed.image_path else {
        return Err(refusal(Denial::new(
            "checkpoint",
            "--image-path",
            "",
            format!(
                "an absolute --image-path below [runtime] checkpoint_dirs is needed (runc's default is {}/checkpoint)",
                std::env::current_dir().unwrap_or_default().display()
            ),
        )));
    };
    let image_dir = checkpoint_dir("--image-path", Path::new(image), dirs).map_err(refusal)?;
    rewrite_last(&mut edits, items, "image-path", &image_dir);
    if let Some(work) = &parsed.work_path {
        let work_dir = checkpoint_dir("--work-path", Path::new(work), dirs).map_err(refusal)?;
        rewrite_last(&mut edits, items, "work-path", &work_dir);
    }
    if let Some(parent) = &parsed.parent_path {
        judge_parent(&image_dir, Path::new(parent), dirs)?;
    }
    Ok(edits.apply(args))
}

/// `--parent-path`: runc joins it to the image path (refusing an absolute
/// one) and CRIU follows it from the image directory as written. The image
/// path reaching runc is resolved, so a leading `..` is that directory's
/// parent; a `..` after a name could step back out of a symlink, so none.
/// Kept as given: what it leads to was judged.
fn judge_parent(
    image_dir: &Path,
    parent: &Path,
    dirs: &[PathBuf],
) -> Result<(), vibe_policy::Refusal> {
    let denial = |reason: String| {
        refusal(Denial::new(
            "checkpoint",
            "--parent-path",
            parent.display().to_string(),
            reason,
        ))
    };
    let mut named = false;
    for part in parent.components() {
        match part {
            Component::Normal(_) => named = true,
            Component::CurDir => {}
            Component::ParentDir if !named => {}
            _ => {
                return Err(denial(
                    "must be relative, any '..' before the first name".into(),
                ))
            }
        }
    }
    checkpoint_dir("--parent-path", &go_clean(&image_dir.join(parent)), dirs)
        .map(|_| ())
        .map_err(|mut d| {
            d.value = parent.display().to_string();
            refusal(d)
        })
}

/// The last `--NAME` gets `path`; earlier ones go (runc reads the last).
fn rewrite_last(edits: &mut Edits, items: &[Item], name: &str, path: &Path) {
    if let Some((item, _)) = edits.keep_last_flag(items, name) {
        edits.set_flag_value(item, &arg(path));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runc_argv::CHECKPOINT_FLAGS;

    #[test]
    fn parent_path_stays_below_the_checkpoint_dirs() {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let image = base.join("img");
        std::fs::create_dir_all(base.join("pre")).unwrap();
        let dirs = [base.clone()];
        assert!(judge_parent(&image, Path::new("../pre"), &dirs).is_ok());
        for bad in ["../../..", "/abs", "pre/../../x", "../../elsewhere"] {
            assert!(
                judge_parent(&image, Path::new(bad), &dirs).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn flags_table_is_checkpoints() {
        assert!(CHECKPOINT_FLAGS
            .iter()
            .any(|f| f.names == ["image-path"] && f.takes_value()));
    }
}
