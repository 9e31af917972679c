//! Tiered KV caches (tests/test-tiers.c has the C shapes): KvStored::tier
//! with and without token ids, kv_removed_tier on the index and the
//! router, MatchFlags::TIER_CPU and TIER_DISK, the candidate rows'
//! cpu_tokens and disk_tokens, and the tier weights.

mod common;

use common::*;
use libroute::*;
use std::collections::HashMap;

const H: [u64; 4] = [11, 12, 13, 14];

/// Tokens `id` holds of `t` on the tier `flags` asks (a dry run).
fn held(x: &mut Index, t: &[u32], id: InstanceId, flags: MatchFlags) -> u32 {
    let m = x
        .match_prompt(&Prompt::new(t), SEC, MatchFlags::NO_TOUCH | flags)
        .unwrap();
    m.hits
        .iter()
        .find(|h| h.instance == id)
        .map_or(0, |h| h.tokens)
}

/// A lower tier's store with no token ids (vLLM's offloading connector).
fn on_tier(hashes: &[u64], tier: Tier) -> KvStored<'_> {
    let mut e = KvStored::new(hashes, 0, &[]);
    e.tier = tier;
    e
}

#[test]
fn constants() {
    assert_eq!(Tier::default(), Tier::Gpu);
    assert_eq!(Tier::Gpu.match_flag(), MatchFlags::NONE);
    assert_eq!(Tier::Cpu.match_flag(), MatchFlags::TIER_CPU);
    assert_eq!(Tier::Disk.match_flag(), MatchFlags::TIER_DISK);
    assert!((MatchFlags::NO_TOUCH | MatchFlags::TIER_CPU).contains(MatchFlags::TIER_CPU));
    assert_eq!(KvStored::new(&H, 16, &[]).tier, Tier::Gpu);
    for (p, def) in [
        (Param::TIER_CPU_WEIGHT, 0.8),
        (Param::TIER_DISK_WEIGHT, 0.25),
    ] {
        let b = p.bounds().unwrap();
        assert_eq!((b.lo, b.hi, b.default), (0.0, 1.0, def), "{p:?}");
    }
    let c = Candidate::new(0);
    assert_eq!((c.cpu_tokens, c.disk_tokens), (0, 0));
}

#[test]
fn index_tiers() {
    let mut x = Index::new(&IndexOptions::default()).unwrap();
    let id = 7;
    let t = prompt(64, 1);
    x.kv_stored(id, &KvStored::new(&H, 16, &t), SEC).unwrap();
    assert_eq!(held(&mut x, &t, id, MatchFlags::TIER_CPU), 0);
    // the last two blocks offloaded, hashes only: the chain goes along
    x.kv_stored(id, &on_tier(&H[2..], Tier::Cpu), SEC).unwrap();
    assert_eq!(held(&mut x, &t, id, MatchFlags::NONE), 64);
    assert_eq!(held(&mut x, &t, id, MatchFlags::TIER_CPU), 64);
    assert_eq!(held(&mut x, &t, id, MatchFlags::TIER_DISK), 0);
    // a GPU removal leaves the CPU copy
    assert_eq!(x.kv_removed_tier(id, Tier::Gpu, &H[1..2]).unwrap(), 1);
    assert_eq!(held(&mut x, &t, id, MatchFlags::NONE), 16);
    assert_eq!(held(&mut x, &t, id, Tier::Cpu.match_flag()), 64);
    // a CPU removal takes the block and the deeper ones, there only
    assert_eq!(x.kv_removed_tier(id, Tier::Cpu, &H[3..]).unwrap(), 1);
    assert_eq!(held(&mut x, &t, id, MatchFlags::TIER_CPU), 48);
    assert_eq!(held(&mut x, &t, id, MatchFlags::NONE), 16);
    // unknown hashes and instances; two tiers at once
    want_err(
        x.kv_stored(id, &on_tier(&[99], Tier::Disk), SEC),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_index_kv_stored",
    );
    want_err(
        x.kv_removed_tier(9, Tier::Cpu, &H[..1]),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_index_kv_removed_tier",
    );
    want_err(
        x.match_prompt(
            &Prompt::new(&t),
            SEC,
            MatchFlags::TIER_CPU | MatchFlags::TIER_DISK,
        ),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_index_match",
    );
    // a disk store, then cleared: every tier
    x.kv_stored(id, &on_tier(&H[..1], Tier::Disk), SEC).unwrap();
    assert_eq!(held(&mut x, &t, id, MatchFlags::TIER_DISK), 16);
    x.kv_cleared(id).unwrap();
    assert_eq!(held(&mut x, &t, id, MatchFlags::TIER_DISK), 0);
    assert_eq!(held(&mut x, &t, id, MatchFlags::TIER_CPU), 0);
}

fn rows(r: &Router, t: &[u32]) -> HashMap<InstanceId, Candidate> {
    r.candidates(&Request::new(0, t, SEC))
        .unwrap()
        .into_iter()
        .map(|c| (c.instance, c))
        .collect()
}

/// 256 tokens, 16 blocks: a holds the first 128 on its GPU; b held all
/// 256, offloaded them to its CPU, then its GPU dropped the first block
/// (and with it the chain). Rows: a 128 + 0, b 0 + 256. dynamo and
/// adaptive choose b at the CPU weight 0.8 and a at 0.25.
#[test]
fn router_rows_carry_cpu_tokens() {
    let t = prompt(256, 5);
    let h: Vec<u64> = (100..116).collect();
    for policy in [Policy::DYNAMO, Policy::ADAPTIVE] {
        let (r, ids) = router(policy, &names(2));
        let (a, b) = (ids[0], ids[1]);
        r.kv_stored(a, &KvStored::new(&h[..8], 16, &t[..128]), SEC)
            .unwrap();
        r.kv_stored(b, &KvStored::new(&h, 16, &t), SEC).unwrap();
        r.kv_stored(b, &on_tier(&h, Tier::Cpu), SEC).unwrap();
        assert_eq!(r.kv_removed_tier(b, Tier::Gpu, &h[..1]).unwrap(), 1);
        want_err(
            r.kv_removed_tier(99, Tier::Cpu, &h[..1]),
            ErrorKind::NotFound,
            "LR_ENOENT",
            "lr_router_kv_removed_tier",
        );
        let m = rows(&r, &t);
        assert_eq!((m[&a].cached_tokens, m[&a].cpu_tokens), (128, 0));
        assert_eq!(
            (m[&b].cached_tokens, m[&b].cpu_tokens, m[&b].disk_tokens),
            (0, 256, 0),
            "{policy}"
        );
        let mut q = Request::new(1, &t, SEC);
        q.flags = RouteFlags::DRY_RUN;
        assert_eq!(r.route(&q).unwrap().instance, b, "{policy} at 0.8");
        r.set_param(Param::TIER_CPU_WEIGHT, 0.25).unwrap();
        assert_eq!(r.route(&q).unwrap().instance, a, "{policy} at 0.25");
        want_err(
            r.set_param(Param::TIER_CPU_WEIGHT, 1.5),
            ErrorKind::Range,
            "LR_ERANGE",
            "lr_router_set_param",
        );
        // a block on both tiers counts on the GPU
        r.kv_stored(b, &KvStored::new(&h[..4], 16, &t[..64]), SEC)
            .unwrap();
        let m = rows(&r, &t);
        assert_eq!((m[&b].cached_tokens, m[&b].cpu_tokens), (64, 192));
        // the CPU tier drops its last four blocks
        assert_eq!(r.kv_removed_tier(b, Tier::Cpu, &h[12..13]).unwrap(), 1);
        assert_eq!(rows(&r, &t)[&b].cpu_tokens, 128);
    }
}

#[test]
fn decide_reads_the_columns() {
    let mut rows = [Candidate::new(0), Candidate::new(1)];
    rows[0].cached_tokens = 128;
    rows[1].cpu_tokens = 256;
    let input = PolicyInput::new(256);
    assert_eq!(decide(Policy::DYNAMO, &input, &rows).unwrap().instance, 1);
    rows[0].cpu_tokens = 256; // past the prompt
    want_err(
        decide(Policy::DYNAMO, &input, &rows),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_policy_decide",
    );
}
