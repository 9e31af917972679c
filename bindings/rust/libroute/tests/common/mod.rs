//! Helpers shared by the integration tests.
#![allow(dead_code)]

use libroute::{Error, ErrorKind, InstanceId, InstanceSpec, Policy, Router, RouterOptions};

pub const SEC: u64 = 1_000_000_000;

/// A small deterministic generator (splitmix64).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub fn prompt(n: usize, seed: u64) -> Vec<u32> {
    let mut r = Rng(seed);
    (0..n).map(|_| r.next() as u32).collect()
}

pub fn names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("10.0.0.{i}:8000")).collect()
}

pub fn router(policy: Policy, names: &[String]) -> (Router, Vec<InstanceId>) {
    let mut o = RouterOptions::default();
    o.policy = policy;
    o.seed = 7;
    let r = Router::new(&o).unwrap_or_else(|e| panic!("Router::new({policy}): {e}"));
    let ids = names
        .iter()
        .map(|n| r.add_instance(&InstanceSpec::new(n)).expect("add_instance"))
        .collect();
    (r, ids)
}

/// Asserts that a result failed with `kind`, raw status `status` and op.
#[track_caller]
pub fn want_err<T: std::fmt::Debug>(r: Result<T, Error>, kind: ErrorKind, name: &str, op: &str) {
    match r {
        Ok(v) => panic!("{op}: got Ok({v:?}), want {name}"),
        Err(e) => {
            assert_eq!(e.kind(), kind, "{e}");
            assert_eq!(e.name(), name, "{e}");
            assert_eq!(e.op(), op, "{e}");
        }
    }
}
