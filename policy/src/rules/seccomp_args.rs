//! Argument conditions of OCI seccomp rules (`args[{index, value, valueTwo,
//! op}]`), read the way runc 1.1 hands them to libseccomp 2.5, and the
//! conjunction of two condition sets as one rule runc will load unchanged.
//!
//! Facts this rests on:
//! - libseccomp ANDs the conditions of one rule, but refuses two conditions
//!   on the same argument (`EINVAL`). runc works around that: when any
//!   argument index repeats in a rule, it adds *every* condition of that rule
//!   as a rule of its own, which ORs them. So a rule with a repeated index
//!   means "any one of these conditions".
//! - `SCMP_CMP_MASKED_EQ` is `(arg & value) == valueTwo`; the other ops
//!   compare `arg` with `value`. A missing `valueTwo` is 0.
//! - On a 32-bit ABI only the low 32 bits are compared, so a conjunction is
//!   folded only when the result is exact at both widths.

use std::collections::BTreeMap;

use serde_json::{json, Value};

/// Linux syscalls take at most six arguments (runc indexes an array of 6).
const MAX_ARGS: u64 = 6;
/// runc's errno for `SCMP_ACT_ERRNO` without `errnoRet`.
const EPERM: u64 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Op {
    Ne,
    Lt,
    Le,
    Eq,
    Ge,
    Gt,
    MaskedEq,
}

impl Op {
    fn parse(text: &str) -> Option<Op> {
        Some(match text {
            "SCMP_CMP_NE" => Op::Ne,
            "SCMP_CMP_LT" => Op::Lt,
            "SCMP_CMP_LE" => Op::Le,
            "SCMP_CMP_EQ" => Op::Eq,
            "SCMP_CMP_GE" => Op::Ge,
            "SCMP_CMP_GT" => Op::Gt,
            "SCMP_CMP_MASKED_EQ" => Op::MaskedEq,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Op::Ne => "SCMP_CMP_NE",
            Op::Lt => "SCMP_CMP_LT",
            Op::Le => "SCMP_CMP_LE",
            Op::Eq => "SCMP_CMP_EQ",
            Op::Ge => "SCMP_CMP_GE",
            Op::Gt => "SCMP_CMP_GT",
            Op::MaskedEq => "SCMP_CMP_MASKED_EQ",
        }
    }
}

/// One condition on one argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Cond {
    pub index: u64,
    pub op: Op,
    pub value: u64,
    pub value_two: u64,
}

/// Conditions that must all hold, at most one per argument, by index.
pub(crate) type Conds = Vec<Cond>;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ArgsError {
    #[error("argument condition {0} is not one runc can load")]
    Invalid(String),
}

impl Cond {
    fn parse(arg: &Value) -> Result<Cond, ArgsError> {
        let invalid = || ArgsError::Invalid(arg.to_string());
        let index = arg
            .get("index")
            .and_then(Value::as_u64)
            .ok_or_else(invalid)?;
        let value = arg
            .get("value")
            .and_then(Value::as_u64)
            .ok_or_else(invalid)?;
        let value_two = match arg.get("valueTwo") {
            None | Some(Value::Null) => 0,
            Some(v) => v.as_u64().ok_or_else(invalid)?,
        };
        let op = arg
            .get("op")
            .and_then(Value::as_str)
            .and_then(Op::parse)
            .ok_or_else(invalid)?;
        if index >= MAX_ARGS {
            return Err(invalid());
        }
        Ok(Cond {
            index,
            op,
            value,
            value_two,
        })
    }

    pub(crate) fn to_json(self) -> Value {
        let mut arg = json!({"index": self.index, "value": self.value, "op": self.op.name()});
        if self.value_two != 0 {
            arg["valueTwo"] = json!(self.value_two);
        }
        arg
    }

    /// Whether the condition holds for `x` at full width.
    fn holds(self, x: u64) -> bool {
        match self.op {
            Op::Ne => x != self.value,
            Op::Lt => x < self.value,
            Op::Le => x <= self.value,
            Op::Eq => x == self.value,
            Op::Ge => x >= self.value,
            Op::Gt => x > self.value,
            Op::MaskedEq => x & self.value == self.value_two,
        }
    }

    /// The condition as a 32-bit ABI sees it: low halves only.
    fn low32(self) -> Cond {
        Cond {
            value: self.value & 0xffff_ffff,
            value_two: self.value_two & 0xffff_ffff,
            ..self
        }
    }

    /// Whether `x` satisfies the condition at both widths.
    fn holds_everywhere(self, x: u64) -> bool {
        self.holds(x) && self.low32().holds(x & 0xffff_ffff)
    }
}

/// The argument conditions of one OCI rule as runc loads them: a list of
/// alternatives (OR), each a set of conditions (AND). No `args` is one
/// alternative with no condition.
pub(crate) fn alternatives(args: Option<&Value>) -> Result<Vec<Conds>, ArgsError> {
    let list = match args {
        None | Some(Value::Null) => return Ok(vec![Vec::new()]),
        Some(Value::Array(list)) => list,
        Some(other) => return Err(ArgsError::Invalid(other.to_string())),
    };
    let conds = list
        .iter()
        .map(Cond::parse)
        .collect::<Result<Vec<_>, _>>()?;
    let mut per_index = BTreeMap::new();
    for cond in &conds {
        *per_index.entry(cond.index).or_insert(0) += 1;
    }
    if per_index.values().any(|&n| n > 1) {
        // runc's fallback: each condition becomes a rule of its own.
        return Ok(conds.into_iter().map(|c| vec![c]).collect());
    }
    let mut all = conds;
    all.sort();
    Ok(vec![all])
}

/// The conjunction of two condition sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Conjunction {
    /// One condition set, at most one condition per argument.
    Rule(Conds),
    /// Nothing satisfies both.
    Empty,
    /// Two conditions on one argument that no single condition equals.
    Inexpressible,
}

pub(crate) fn conjoin(a: &Conds, b: &Conds) -> Conjunction {
    let mut by_index: BTreeMap<u64, Cond> = a.iter().map(|c| (c.index, *c)).collect();
    for cond in b {
        let folded = match by_index.get(&cond.index) {
            None => Fold::One(*cond),
            Some(existing) => fold(*existing, *cond),
        };
        match folded {
            Fold::One(c) => {
                by_index.insert(c.index, c);
            }
            Fold::Empty => return Conjunction::Empty,
            Fold::Inexpressible => return Conjunction::Inexpressible,
        }
    }
    Conjunction::Rule(by_index.into_values().collect())
}

enum Fold {
    One(Cond),
    Empty,
    Inexpressible,
}

/// `a AND b` on the same argument as one condition, when one exists.
fn fold(a: Cond, b: Cond) -> Fold {
    if a == b {
        return Fold::One(a);
    }
    if a.op == Op::Eq || b.op == Op::Eq {
        let (eq, other) = if a.op == Op::Eq { (a, b) } else { (b, a) };
        return if other.holds_everywhere(eq.value) {
            Fold::One(eq)
        } else {
            Fold::Empty
        };
    }
    if a.op == Op::MaskedEq && b.op == Op::MaskedEq {
        let unsatisfiable = |c: Cond| c.value_two & !c.value != 0;
        if unsatisfiable(a)
            || unsatisfiable(b)
            || (a.value_two ^ b.value_two) & a.value & b.value != 0
        {
            return Fold::Empty;
        }
        return Fold::One(Cond {
            value: a.value | b.value,
            value_two: a.value_two | b.value_two,
            ..a
        });
    }
    // Same-direction bounds that fit in 32 bits: the tighter one.
    let small = |c: Cond| c.value <= u64::from(u32::MAX);
    if small(a) && small(b) {
        let upper = |c: Cond| match c.op {
            Op::Lt => Some(c.value.checked_sub(1)),
            Op::Le => Some(Some(c.value)),
            _ => None,
        };
        let lower = |c: Cond| match c.op {
            Op::Gt => Some(c.value + 1),
            Op::Ge => Some(c.value),
            _ => None,
        };
        if let (Some(ua), Some(ub)) = (upper(a), upper(b)) {
            return match (ua, ub) {
                (None, _) | (_, None) => Fold::Empty,
                (Some(x), Some(y)) => Fold::One(if x <= y { a } else { b }),
            };
        }
        if let (Some(la), Some(lb)) = (lower(a), lower(b)) {
            return Fold::One(if la >= lb { a } else { b });
        }
    }
    Fold::Inexpressible
}

/// Actions that stop a syscall (runc's "kill" is kill-thread).
pub(crate) fn is_stop(action: &str) -> bool {
    matches!(
        action,
        "SCMP_ACT_ERRNO"
            | "SCMP_ACT_KILL"
            | "SCMP_ACT_KILL_THREAD"
            | "SCMP_ACT_KILL_PROCESS"
            | "SCMP_ACT_TRAP"
    )
}

/// An action as runc compiles it, for comparing a rule with a default.
pub(crate) fn compiled(action: &str, errno: Option<u64>) -> (&str, u64) {
    match action {
        "SCMP_ACT_KILL" => ("SCMP_ACT_KILL_THREAD", 0),
        "SCMP_ACT_ERRNO" | "SCMP_ACT_TRACE" => (action, errno.unwrap_or(EPERM)),
        other => (other, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(index: u64, op: Op, value: u64, value_two: u64) -> Cond {
        Cond {
            index,
            op,
            value,
            value_two,
        }
    }

    #[test]
    fn repeated_index_is_an_or_like_runc() {
        let args = json!([
            {"index": 0, "value": 1, "op": "SCMP_CMP_EQ"},
            {"index": 0, "value": 2, "op": "SCMP_CMP_EQ"},
            {"index": 1, "value": 3, "op": "SCMP_CMP_EQ"}
        ]);
        let alts = alternatives(Some(&args)).unwrap();
        assert_eq!(alts.len(), 3);
        assert!(alts.iter().all(|a| a.len() == 1));
        let args = json!([
            {"index": 2, "value": 1, "op": "SCMP_CMP_EQ"},
            {"index": 0, "value": 7, "valueTwo": 1, "op": "SCMP_CMP_MASKED_EQ"}
        ]);
        assert_eq!(
            alternatives(Some(&args)).unwrap(),
            vec![vec![c(0, Op::MaskedEq, 7, 1), c(2, Op::Eq, 1, 0)]]
        );
        assert_eq!(alternatives(None).unwrap(), vec![Vec::<Cond>::new()]);
    }

    #[test]
    fn invalid_conditions_are_errors() {
        for arg in [
            json!({"index": 6, "value": 1, "op": "SCMP_CMP_EQ"}),
            json!({"index": 0, "value": -1, "op": "SCMP_CMP_EQ"}),
            json!({"index": 0, "value": 1, "op": "SCMP_CMP_BOGUS"}),
            json!({"value": 1, "op": "SCMP_CMP_EQ"}),
        ] {
            assert!(alternatives(Some(&json!([arg]))).is_err(), "{arg}");
        }
    }

    #[test]
    fn conjunction_of_different_arguments_is_both() {
        let a = vec![c(0, Op::Eq, 1, 0)];
        let b = vec![c(2, Op::Ne, 5, 0)];
        assert_eq!(
            conjoin(&a, &b),
            Conjunction::Rule(vec![c(0, Op::Eq, 1, 0), c(2, Op::Ne, 5, 0)])
        );
        assert_eq!(conjoin(&Vec::new(), &b), Conjunction::Rule(b.clone()));
    }

    #[test]
    fn equality_folds_or_empties() {
        let eq = |v| vec![c(0, Op::Eq, v, 0)];
        assert_eq!(conjoin(&eq(2), &eq(2)), Conjunction::Rule(eq(2)));
        assert_eq!(conjoin(&eq(2), &eq(3)), Conjunction::Empty);
        let ne40 = vec![c(0, Op::Ne, 40, 0)];
        assert_eq!(conjoin(&eq(2), &ne40), Conjunction::Rule(eq(2)));
        assert_eq!(conjoin(&ne40, &eq(40)), Conjunction::Empty);
        // Equal in the low 32 bits: a 32-bit ABI would see x == 40.
        assert_eq!(conjoin(&eq(0x1_0000_0028), &ne40), Conjunction::Empty);
        let mask = vec![c(0, Op::MaskedEq, 0x7E02_0000, 0)];
        assert_eq!(conjoin(&eq(0x11), &mask), Conjunction::Rule(eq(0x11)));
        assert_eq!(conjoin(&eq(0x1000_0000), &mask), Conjunction::Empty);
    }

    #[test]
    fn masks_fold_when_consistent() {
        let a = vec![c(0, Op::MaskedEq, 0xF0, 0x10)];
        let b = vec![c(0, Op::MaskedEq, 0x0F, 0x01)];
        assert_eq!(
            conjoin(&a, &b),
            Conjunction::Rule(vec![c(0, Op::MaskedEq, 0xFF, 0x11)])
        );
        let clash = vec![c(0, Op::MaskedEq, 0x30, 0x20)];
        assert_eq!(conjoin(&a, &clash), Conjunction::Empty);
    }

    #[test]
    fn bounds_keep_the_tighter_and_the_rest_is_inexpressible() {
        let lt = |v| vec![c(1, Op::Lt, v, 0)];
        assert_eq!(conjoin(&lt(5), &lt(3)), Conjunction::Rule(lt(3)));
        assert_eq!(
            conjoin(&lt(5), &vec![c(1, Op::Le, 3, 0)]),
            Conjunction::Rule(vec![c(1, Op::Le, 3, 0)])
        );
        assert_eq!(conjoin(&lt(0), &lt(3)), Conjunction::Empty);
        let gt = vec![c(1, Op::Gt, 3, 0)];
        assert_eq!(
            conjoin(&gt, &vec![c(1, Op::Ge, 9, 0)]),
            Conjunction::Rule(vec![c(1, Op::Ge, 9, 0)])
        );
        assert_eq!(conjoin(&lt(5), &gt), Conjunction::Inexpressible);
        let ne = |v| vec![c(1, Op::Ne, v, 0)];
        assert_eq!(conjoin(&ne(1), &ne(2)), Conjunction::Inexpressible);
        assert_eq!(
            conjoin(&lt(u64::MAX), &lt(3)),
            Conjunction::Inexpressible,
            "wide bounds are not folded"
        );
    }

    #[test]
    fn actions() {
        assert!(is_stop("SCMP_ACT_KILL_PROCESS") && is_stop("SCMP_ACT_TRAP"));
        for pass in [
            "SCMP_ACT_ALLOW",
            "SCMP_ACT_LOG",
            "SCMP_ACT_TRACE",
            "SCMP_ACT_NOTIFY",
            "",
        ] {
            assert!(!is_stop(pass), "{pass}");
        }
        assert_eq!(
            compiled("SCMP_ACT_ERRNO", None),
            compiled("SCMP_ACT_ERRNO", Some(1))
        );
        assert_eq!(
            compiled("SCMP_ACT_KILL", None),
            compiled("SCMP_ACT_KILL_THREAD", None)
        );
        assert_ne!(
            compiled("SCMP_ACT_ERRNO", Some(38)),
            compiled("SCMP_ACT_ERRNO", None)
        );
    }
}
