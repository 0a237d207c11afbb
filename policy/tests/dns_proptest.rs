//! The DNS answerer reads messages from the container: no input makes it
//! panic, a response is never answered, an answer echoes the query's id and
//! question, and only a name the policy allows ever gets an address.

use proptest::prelude::*;
use vibe_policy::egress::dns::{answer, build_query, formerr, is_fake, parse_query, FakePool};

fn allowed(name: &str) -> bool {
    name == "api.example.com"
}

fn check(msg: &[u8]) -> Result<(), TestCaseError> {
    let mut pool = FakePool::new(8);
    match parse_query(msg) {
        Ok(q) => {
            let a = answer(&q, allowed, &mut pool);
            prop_assert_eq!(&a.message[..2], &msg[..2]);
            prop_assert_eq!(a.message[2] & 0x80, 0x80);
            if let Some(addr) = a.address {
                prop_assert!(is_fake(addr));
                prop_assert_eq!(q.name.as_deref(), Ok("api.example.com"));
            }
            prop_assert!(a.message.len() <= msg.len() + 16);
        }
        Err(vibe_policy::egress::dns::DnsError::Malformed(_)) => {
            prop_assert!(formerr(msg).is_some());
        }
        Err(_) => {}
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn any_bytes(msg in proptest::collection::vec(any::<u8>(), 0..600)) {
        check(&msg)?;
    }

    #[test]
    fn mutated_queries(
        name in "[a-z0-9.-]{0,70}",
        qtype in any::<u16>(),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        cut in any::<usize>(),
    ) {
        let mut msg = build_query(0x1234, &name, qtype);
        for (at, byte) in flips {
            let n = msg.len();
            msg[at % n] = byte;
        }
        let keep = msg.len() - cut % (msg.len() + 1);
        msg.truncate(keep);
        check(&msg)?;
    }
}
