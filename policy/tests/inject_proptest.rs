//! Properties of the credential judge: the Basic codec has one encoding
//! per value, and whatever head a container writes, what goes upstream
//! never carries a placeholder, and carries a secret only where bound.

use std::path::PathBuf;

use proptest::prelude::*;
use vibe_policy::egress::credential::{Binding, Inject};
use vibe_policy::egress::inject::{basic_decode, basic_encode, judge};

const KEY: &str = "sk-ant-PLACEHOLDERaaaaaaaaaaaaaaaa";
const TOKEN: &str = "ghp_PLACEHOLDERbbbbbbbbbbbbbbbbbb";
const SECRET: &str = "REAL-SECRET-VALUE";

fn bindings() -> Vec<Binding> {
    vec![
        Binding {
            name: "key".into(),
            hosts: vec!["api.example.com".into()],
            inject: Inject::Header {
                name: "x-api-key".into(),
                scheme: None,
            },
            source: PathBuf::from("/k"),
            placeholder: KEY.into(),
        },
        Binding {
            name: "git".into(),
            hosts: vec!["git.example.com".into()],
            inject: Inject::Basic {
                user: "x-access-token".into(),
            },
            source: PathBuf::from("/g"),
            placeholder: TOKEN.into(),
        },
    ]
}

/// One header line a container might write, placeholders included.
fn header() -> impl Strategy<Value = (String, String)> {
    let name = prop_oneof![
        Just("x-api-key".to_string()),
        Just("Authorization".to_string()),
        Just("Cookie".to_string()),
        "[A-Za-z][A-Za-z0-9-]{0,12}",
    ];
    let value = prop_oneof![
        Just(KEY.to_string()),
        Just(format!("Bearer {KEY}")),
        Just(format!("Basic {}", basic_encode("x-access-token", TOKEN))),
        Just(format!("Basic {}", basic_encode("x-access-token", KEY))),
        Just(format!("Basic {}", basic_encode("other", TOKEN))),
        Just(format!("a={}", basic_encode("u", KEY))),
        Just(format!("x{TOKEN}")),
        "[ -~]{0,40}",
    ];
    (name, value)
}

proptest! {
    #[test]
    fn basic_round_trips(user in "[^:\u{0}]{0,20}", password in "\\PC{0,40}") {
        let b64 = basic_encode(&user, &password);
        prop_assert_eq!(basic_decode(&b64), Some((user, password)));
    }

    #[test]
    fn basic_decodes_only_its_own_encoding(text in "[A-Za-z0-9+/=]{0,40}") {
        if let Some((u, p)) = basic_decode(&text) {
            prop_assert_eq!(basic_encode(&u, &p), text);
        }
    }

    #[test]
    fn upstream_never_sees_a_placeholder(
        host in prop_oneof![Just("api.example.com"), Just("git.example.com")],
        target in prop_oneof![Just("/".to_string()), "/[a-z0-9=?&%]{0,20}".prop_map(|s| s), Just(format!("/?k={KEY}"))],
        headers in proptest::collection::vec(header(), 0..6),
    ) {
        let mut head = format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n");
        for (n, v) in &headers {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let b = bindings();
        if let Ok(Some(plan)) = judge(head.as_bytes(), 8192, host, 443, &b) {
            let secrets = vec![SECRET.to_string(); plan.swaps.len()];
            let out = String::from_utf8(plan.render(&b, &secrets).head).unwrap();
            let lower = out.to_ascii_lowercase();
            prop_assert!(!lower.contains(&KEY.to_ascii_lowercase()), "{}", out);
            prop_assert!(!lower.contains(&TOKEN.to_ascii_lowercase()), "{}", out);
            for s in &plan.swaps {
                prop_assert!(b[s.binding].hosts.iter().any(|h| h == host));
            }
            let basic = format!("Basic {}", basic_encode("x-access-token", SECRET));
            let carried = out.matches(SECRET).count() + out.matches(&basic).count();
            prop_assert_eq!(carried, plan.swaps.len(), "{}", out);
        }
    }
}
