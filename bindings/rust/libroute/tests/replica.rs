//! Many gateway replicas: KV-event batches in sequence, deltas once, load
//! gauges, snapshot and restore.

mod common;

use common::*;
use libroute::{ErrorKind, Index, IndexOptions, KvSeq, Policy, Request, Router, RouterOptions};
use std::time::Duration;

/// A vLLM batch [ts, [BlockStored(hash, tokens)], 0], positional.
fn store(ts: f64, hash: u64, tokens: &[u32]) -> Vec<u8> {
    let mut m = vec![0x93, 0xcb];
    m.extend_from_slice(&ts.to_bits().to_be_bytes());
    m.push(0x91);
    m.push(0x97);
    m.push(0xab);
    m.extend_from_slice(b"BlockStored");
    m.extend_from_slice(&[0x91, 0xcf]);
    m.extend_from_slice(&hash.to_be_bytes());
    m.push(0xc0);
    m.push(0xdc);
    m.extend_from_slice(&(tokens.len() as u16).to_be_bytes());
    for t in tokens {
        m.push(0xce);
        m.extend_from_slice(&t.to_be_bytes());
    }
    m.push(0x10); // block size 16
    m.push(0xc0); // lora_id
    m.extend_from_slice(&[0xa3, b'G', b'P', b'U']);
    m.push(0x00); // dp rank
    m
}

fn replica(policy: Policy, id: u64, n: usize) -> Router {
    let mut o = RouterOptions::default();
    o.policy = policy;
    o.seed = 7;
    o.replica_id = id;
    let r = Router::new(&o).expect("Router::new");
    for name in names(n) {
        r.add_instance(&libroute::InstanceSpec::new(&name))
            .expect("add");
    }
    r
}

#[test]
fn batches_in_sequence() {
    let r = replica(Policy::PREFIX_CACHE, 0, 2);
    let t = prompt(64, 1);
    let info = r
        .vllm_batch_seq(1, 5, &store(1.0, 10, &t[..16]), SEC)
        .unwrap();
    assert_eq!((info.seq_state, info.next_seq), (KvSeq::First, 6));
    let info = r
        .vllm_batch_seq(1, 5, &store(1.0, 10, &t[..16]), SEC)
        .unwrap();
    assert_eq!(info.seq_state, KvSeq::Duplicate);
    let e = r
        .vllm_batch_seq(1, 7, &store(3.0, 12, &t[32..48]), SEC)
        .unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::Gap);
    assert_eq!((e.info.seq_state, e.info.next_seq), (KvSeq::Gap, 6));
    let src = r.kv_source(1).unwrap();
    assert!(src.gap && src.next_seq == 6 && src.gaps == 1);
    r.vllm_batch_seq(1, 6, &store(2.0, 11, &t[16..32]), SEC)
        .unwrap();
    r.vllm_batch_seq(1, 7, &store(3.0, 12, &t[32..48]), SEC)
        .unwrap();
    let info = r
        .vllm_batch_seq(1, 0, &store(50.0, 20, &t[..16]), SEC)
        .unwrap();
    assert_eq!(info.seq_state, KvSeq::Restart);
    r.kv_reset(1).unwrap();
    assert!(!r.kv_source(1).unwrap().has_seq);
    want_err(
        r.kv_reset(9),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_router_kv_reset",
    );
    let s = r.stats().unwrap();
    assert_eq!((s.kv_gaps, s.kv_duplicates, s.kv_restarts), (1, 1, 2));
}

#[test]
fn fleet_files_apply() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../tests/data/kv-events");
    let mut n = 0;
    for f in std::fs::read_dir(&dir).expect("tests/data/kv-events") {
        let f = f.unwrap().path();
        if f.extension().map_or(true, |e| e != "msgpack") {
            continue;
        }
        let mut x = Index::new(&IndexOptions::default()).unwrap();
        let info = x.vllm_batch(7, &std::fs::read(&f).unwrap(), SEC).unwrap();
        assert_eq!((info.stored, info.done), (1, info.events), "{f:?}");
        n += 1;
    }
    assert_eq!(n, 10);
}

#[test]
fn deltas_gauges_snapshot() {
    let a = replica(Policy::ROUND_ROBIN, 1, 3);
    let b = replica(Policy::LEAST_REQUEST, 2, 3);
    for i in 1..=4u64 {
        let t = prompt(64, i);
        a.route(&Request::new(i, &t, SEC)).unwrap();
    }
    let (d, _) = a.export_delta(0).unwrap();
    b.import_delta(&d, SEC).unwrap();
    b.import_delta(&d, SEC).unwrap();
    a.import_delta(&d, SEC).unwrap(); // its own echo
    let s = b.stats().unwrap();
    assert_eq!((s.deltas_imported, s.deltas_skipped), (1, 1));
    assert_eq!(a.stats().unwrap().deltas_skipped, 1);

    let g = a.export_gauges().unwrap();
    b.import_gauges(&g, SEC).unwrap();
    let t = prompt(16, 9);
    let rows = b.candidates(&Request::new(0, &t, SEC)).unwrap();
    assert_eq!(rows.iter().map(|c| c.inflight).sum::<u32>(), 4);
    want_err(
        b.import_gauges(&g[..g.len() - 1], SEC),
        ErrorKind::Corrupt,
        "LR_ECORRUPT",
        "lr_router_import_gauges",
    );
    want_err(
        replica(Policy::ROUND_ROBIN, 0, 1).export_gauges(),
        ErrorKind::State,
        "LR_ESTATE",
        "lr_router_export_gauges",
    );

    let snap = b.snapshot(2 * SEC).unwrap();
    let mut o = RouterOptions::default();
    o.replica_id = 3;
    o.gauge_ttl = Duration::from_secs(1);
    let c = Router::new(&o).unwrap();
    c.restore(&snap, 2 * SEC).unwrap();
    assert_eq!(c.instance_count(), 3);
    let again = c.snapshot(2 * SEC).unwrap();
    assert_eq!(again[32..again.len() - 8], snap[32..snap.len() - 8]);
    want_err(
        c.restore(&snap, 2 * SEC),
        ErrorKind::State,
        "LR_ESTATE",
        "lr_router_restore",
    );
    let e = Router::new(&RouterOptions::default()).unwrap();
    want_err(
        e.restore(&snap[..40], SEC),
        ErrorKind::Corrupt,
        "LR_ECORRUPT",
        "lr_router_restore",
    );
}
