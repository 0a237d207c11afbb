//! The image's `/etc/passwd`, read as glibc's files backend reads it: one
//! entry a line, seven `:`-separated fields, and the first entry for a uid
//! wins (what `getpwuid` inside the container returns).

use std::collections::BTreeMap;

/// Each uid's home directory field, as written (judged by the caller).
/// Lines that are not a well-formed entry are skipped, as glibc skips them.
pub fn homes(text: &[u8]) -> BTreeMap<u32, String> {
    let mut out = BTreeMap::new();
    for line in text.split(|b| *b == b'\n') {
        let Ok(line) = std::str::from_utf8(line) else {
            continue;
        };
        if line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split(':').collect();
        let [_, _, uid, _, _, home, _] = fields.as_slice() else {
            continue;
        };
        // Only digits: `+name` and `-name` lines (NIS compat) carry no uid.
        if uid.is_empty() || !uid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(uid) = uid.parse::<u32>() {
            out.entry(uid).or_insert_with(|| home.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_entry_per_uid_and_malformed_lines_skipped() {
        let text = b"root:x:0:0:root:/root:/bin/sh\n\
            agent:x:1000:1000:Agent:/home/agent:/bin/bash\n\
            dup:x:1000:1000::/home/dup:/bin/sh\n\
            short:x:1001:1001:/home/short\n\
            +nis::::::\n\
            # c:x:1002:1002::/c:/bin/sh\n\
            big:x:99999999999:1::/big:/bin/sh\n\
            plus:x:+7:1::/plus:/bin/sh\n\
            bad\xff:x:1003:1003::/home/bad:/bin/sh\n\
            last:x:1004:1004::/home/last:/bin/sh";
        let homes = homes(text);
        assert_eq!(homes.get(&0).map(String::as_str), Some("/root"));
        assert_eq!(homes.get(&1000).map(String::as_str), Some("/home/agent"));
        assert_eq!(homes.get(&1004).map(String::as_str), Some("/home/last"));
        for uid in [1001, 1002, 1003, 7] {
            assert!(!homes.contains_key(&uid), "{uid}");
        }
        assert_eq!(homes.len(), 3);
    }
}
