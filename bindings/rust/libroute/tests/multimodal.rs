//! Multimodal inputs (tests/test-vllm.c router_multimodal_match and
//! tests/test-index.c mm_keys_model have the C shapes): a request or
//! prompt with an image matches the blocks the engine stored with that
//! image, and only those; `mm_key_hash` is the documented hash.

mod common;

use common::*;
use libroute::*;

const BT: u32 = 16;
const IMG_A: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
const IMG_B: &str = "img-b";

/// The image's placeholder tokens 19..39 of a 48-token prompt: blocks 1
/// and 2, at offsets 3 and 3 - 16 from their first tokens.
const IMG: MmInput<'static> = MmInput {
    identifier: IMG_A,
    offset: BT + 3,
    length: 20,
};

/// The per-block multimodal hashes of three blocks with IMG's placeholder
/// filled by `id`.
fn mm_hashes(id: &str) -> [u64; 3] {
    [0, mm_key_hash(id, 3), mm_key_hash(id, 3 - BT as i64)]
}

/// Input lists refused with `LR_EINVAL` for a prompt of `n` tokens;
/// `long` is one byte too long an identifier, `too_long` far too long.
fn bad_inputs<'a>(n: u32, long: &'a str, too_long: &'a str) -> Vec<Vec<MmInput<'a>>> {
    vec![
        vec![MmInput::new("", 0, 4)],        // empty identifier
        vec![MmInput::new(long, 0, 4)],      // one byte too long
        vec![MmInput::new(too_long, 0, 4)],  // far too long
        vec![MmInput::new(IMG_A, 0, 0)],     // no tokens
        vec![MmInput::new(IMG_A, n - 2, 4)], // past the prompt
        vec![MmInput::new(IMG_A, 10, 8), MmInput::new(IMG_B, 12, 4)], // overlapping
        vec![MmInput::new(IMG_A, 20, 4), MmInput::new(IMG_B, 10, 4)], // out of order
        vec![MmInput::new(IMG_A, u32::MAX, 4)], // offset overflows
        vec![MmInput::new("a\0b", 0, 4)],    // a NUL inside
    ]
}

struct Long(String, String);

fn long() -> Long {
    Long("x".repeat(MAX_MM_IDENTIFIER as usize + 1), "x".repeat(4096))
}

#[test]
fn key_hash_is_the_documented_one() {
    // XXH3_64bits_withSeed(lr_name_hash(id) and offset as 8 little-endian
    // bytes each, 0x4c524d4d4b455931), computed apart from the library
    // with xxHash itself.
    for (id, off, want) in [
        ("img-a", 0, 0xe90b_4800_53e9_c1b6),
        ("img-a", 3, 0xdaae_4e2a_2b0c_5b58),
        ("img-a", -13, 0x6567_d684_16fa_aaee),
        ("img-a", i64::MIN, 0x5328_aabe_899d_dcc0),
        (IMG_A, 3, 0x6228_17ec_d71d_32e8),
        (IMG_A, -13, 0xe476_f936_a5db_635d),
        ("audio-c", 4096, 0xcbfe_e605_fdae_bbb6),
    ] {
        assert_eq!(mm_key_hash(id, off), want, "{id} {off}");
    }
    assert_ne!(mm_key_hash("img-a", 3), mm_key_hash("img-a", 4));
    assert_ne!(mm_key_hash("img-a", 3), mm_key_hash("img-b", 3));
    assert_eq!(MAX_MM_IDENTIFIER, 255);
    assert!(Prompt::new(&[]).mm.is_empty());
    assert!(Request::new(1, &[], 0).mm.is_empty());
    assert_eq!(KvStored::new(&[], 16, &[]).mm_hashes, None);
}

fn held(x: &mut Index, t: &[u32], mm: &[MmInput<'_>], id: InstanceId) -> u32 {
    let mut p = Prompt::new(t);
    p.mm = mm;
    let m = x.match_prompt(&p, SEC, MatchFlags::NO_TOUCH).unwrap();
    m.hits
        .iter()
        .find(|h| h.instance == id)
        .map_or(0, |h| h.tokens)
}

fn index() -> Index {
    let mut o = IndexOptions::default();
    o.block_tokens = BT;
    Index::new(&o).unwrap()
}

#[test]
fn index_learn_and_match() {
    let mut x = index();
    let t = prompt(48, 1);
    let mut p = Prompt::new(&t);
    p.mm = &[IMG];
    x.learn(&p, 1, Trust::Local, SEC).unwrap();
    assert_eq!(held(&mut x, &t, &[IMG], 1), 48);
    // the text before the image only: without it, with another one, with
    // it elsewhere
    assert_eq!(held(&mut x, &t, &[], 1), BT);
    assert_eq!(held(&mut x, &t, &[MmInput::new(IMG_B, BT + 3, 20)], 1), BT);
    assert_eq!(held(&mut x, &t, &[MmInput::new(IMG_A, BT + 4, 19)], 1), BT);
    // the engine's store of the same blocks keys them alike
    let h = mm_hashes(IMG_A);
    let mut e = KvStored::new(&[7, 8, 9], BT, &t);
    e.mm_hashes = Some(&h);
    x.kv_stored(2, &e, SEC).unwrap();
    assert_eq!(held(&mut x, &t, &[IMG], 2), 48);
    assert_eq!(held(&mut x, &t, &[], 2), BT);
    // all-zero hashes: the text's keys
    let mut e = KvStored::new(&[17, 18, 19], BT, &t);
    e.mm_hashes = Some(&[0, 0, 0]);
    x.kv_stored(3, &e, SEC).unwrap();
    assert_eq!(held(&mut x, &t, &[], 3), 48);
    assert_eq!(held(&mut x, &t, &[IMG], 3), BT);
}

#[test]
fn index_refusals() {
    let mut x = index();
    let t = prompt(48, 2);
    let l = long();
    for mm in bad_inputs(48, &l.0, &l.1) {
        let mut p = Prompt::new(&t);
        p.mm = &mm;
        want_err(
            x.learn(&p, 1, Trust::Local, SEC),
            ErrorKind::Invalid,
            "LR_EINVAL",
            "lr_index_learn",
        );
        want_err(
            x.match_prompt(&p, SEC, MatchFlags::NONE),
            ErrorKind::Invalid,
            "LR_EINVAL",
            "lr_index_match",
        );
    }
    // not with keys
    let keys = block_keys(BT, &t, 0).unwrap();
    let mut p = Prompt::new(&t);
    p.keys = Some(&keys);
    p.mm = &[IMG];
    want_err(
        x.learn(&p, 1, Trust::Local, SEC),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_index_learn",
    );
    // one hash per block, no other count
    for n in [0, 2, 4] {
        let h = vec![0u64; n];
        let mut e = KvStored::new(&[1, 2, 3], BT, &t);
        e.mm_hashes = Some(&h);
        want_err(
            x.kv_stored(1, &e, SEC),
            ErrorKind::Invalid,
            "LR_EINVAL",
            "lr_index_kv_stored",
        );
    }
    // a nonzero hash needs the engine's blocks to be the index's
    let h = [mm_key_hash(IMG_A, 3)];
    let mut e = KvStored::new(&[1], 2 * BT, &t[..32]);
    e.mm_hashes = Some(&h);
    want_err(
        x.kv_stored(1, &e, SEC),
        ErrorKind::NotSupported,
        "LR_ENOTSUP",
        "lr_index_kv_stored",
    );
    assert_eq!(x.stats().unwrap().blocks, 0);
}

fn mm_router() -> (Router, Vec<InstanceId>) {
    let mut o = RouterOptions::default();
    o.policy = Policy::PREFIX_CACHE;
    o.seed = 3;
    o.block_tokens = BT;
    let r = Router::new(&o).unwrap();
    // a third of the prompt cached is a prefix hit (default: half)
    r.set_param(Param::PREFIX_MIN_RATIO, 0.25).unwrap();
    let ids = names(3)
        .iter()
        .map(|n| r.add_instance(&InstanceSpec::new(n)).unwrap())
        .collect();
    (r, ids)
}

/// A vLLM batch of one positional BlockStored event whose extra_keys give
/// each block's (identifier, offset) pairs.
fn stored_batch(hashes: &[u64], toks: &[u32], block_size: u64, keys: &[&[(&str, i64)]]) -> Vec<u8> {
    fn arr(m: &mut Vec<u8>, n: usize) {
        assert!(n <= 15);
        m.push(0x90 | n as u8);
    }
    fn uint(m: &mut Vec<u8>, v: u64) {
        m.push(0xcf);
        m.extend_from_slice(&v.to_be_bytes());
    }
    fn str(m: &mut Vec<u8>, s: &str) {
        m.extend_from_slice(&[0xd9, s.len() as u8]);
        m.extend_from_slice(s.as_bytes());
    }
    fn uints(m: &mut Vec<u8>, v: &[u64]) {
        m.push(0xdd);
        m.extend_from_slice(&(v.len() as u32).to_be_bytes());
        for &x in v {
            uint(m, x);
        }
    }
    let mut m = Vec::new();
    arr(&mut m, 3);
    m.push(0xcb);
    m.extend_from_slice(&1.5f64.to_bits().to_be_bytes());
    arr(&mut m, 1);
    arr(&mut m, 9);
    str(&mut m, "BlockStored");
    uints(&mut m, hashes);
    m.push(0xc0); // parent
    uints(&mut m, &toks.iter().map(|&t| t as u64).collect::<Vec<_>>());
    uint(&mut m, block_size);
    m.push(0xc0); // lora_id
    str(&mut m, "GPU");
    m.push(0xc0); // lora_name
    arr(&mut m, keys.len());
    for k in keys {
        if k.is_empty() {
            m.push(0xc0);
            continue;
        }
        arr(&mut m, k.len());
        for &(id, off) in k.iter() {
            arr(&mut m, 2);
            str(&mut m, id);
            m.push(0xd3);
            m.extend_from_slice(&off.to_be_bytes());
        }
    }
    uint(&mut m, 0); // data-parallel rank
    m
}

#[test]
fn router_matches_the_engine_store() {
    let (r, ids) = mm_router();
    let t = prompt(48, 29);
    // ids[2] stored the prompt with the image (a vLLM batch, extra_keys
    // per block), ids[1] its text block alone
    let payload = stored_batch(
        &[97, 98, 99],
        &t,
        BT as u64,
        &[&[], &[(IMG_A, 3)], &[(IMG_A, 3 - BT as i64)]],
    );
    let info = r.vllm_batch(ids[2], &payload, SEC).unwrap();
    assert_eq!(info.stored, 1);
    r.kv_stored(ids[1], &KvStored::new(&[100], BT, &t[..BT as usize]), SEC)
        .unwrap();
    let route = |id: u64, mm: &[MmInput<'_>], flags: RouteFlags| {
        let mut q = Request::new(id, &t, SEC);
        q.flags = flags;
        q.mm = mm;
        r.route(&q).unwrap()
    };
    let d = route(1, &[IMG], RouteFlags::DRY_RUN);
    assert_eq!((d.instance, d.cached_tokens), (ids[2], 48));
    for mm in [&[MmInput::new(IMG_B, BT + 3, 20)][..], &[]] {
        let d = route(1, mm, RouteFlags::DRY_RUN);
        assert_eq!(d.cached_tokens, BT, "{mm:?}");
    }
    // the candidate table and the policy input see the same
    let mut q = Request::new(0, &t, SEC);
    q.mm = &[IMG];
    let rows: Vec<u32> = r
        .candidates(&q)
        .unwrap()
        .iter()
        .map(|c| c.cached_tokens)
        .collect();
    assert_eq!(rows, [0, BT, 48]);
    let mut params = Vec::new();
    assert_eq!(r.policy_input(&q, &mut params).unwrap().prompt_tokens, 48);
    q.mm = &[];
    let rows: Vec<u32> = r
        .candidates(&q)
        .unwrap()
        .iter()
        .map(|c| c.cached_tokens)
        .collect();
    assert_eq!(rows, [0, BT, BT]);
    // a routed request is learned with its inputs
    let other = [MmInput::new(IMG_B, BT + 3, 20)];
    let d = route(2, &other, RouteFlags::NONE);
    let d2 = route(3, &other, RouteFlags::DRY_RUN);
    assert_eq!((d2.instance, d2.cached_tokens), (d.instance, 48));
    // the engine's hashes through the router
    let t3 = prompt(48, 30);
    let h = mm_hashes(IMG_A);
    let mut e = KvStored::new(&[1, 2, 3], BT, &t3);
    e.mm_hashes = Some(&h);
    r.kv_stored(ids[0], &e, SEC).unwrap();
    let mut q = Request::new(4, &t3, SEC);
    q.flags = RouteFlags::DRY_RUN;
    q.mm = &[IMG];
    let d = r.route(&q).unwrap();
    assert_eq!((d.instance, d.cached_tokens), (ids[0], 48));
    let mut e = KvStored::new(&[4], BT, &t3[..BT as usize]);
    e.mm_hashes = Some(&[]);
    want_err(
        r.kv_stored(ids[0], &e, SEC),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_router_kv_stored",
    );
}

#[test]
fn router_refusals_change_nothing() {
    let (r, _) = mm_router();
    let t = prompt(48, 31);
    let before = r.stats().unwrap();
    let l = long();
    for mm in bad_inputs(48, &l.0, &l.1) {
        let mut q = Request::new(2, &t, SEC);
        q.mm = &mm;
        want_err(
            r.route(&q),
            ErrorKind::Invalid,
            "LR_EINVAL",
            "lr_router_route",
        );
        want_err(
            r.candidates(&q),
            ErrorKind::Invalid,
            "LR_EINVAL",
            "lr_router_candidates",
        );
        let mut params = Vec::new();
        want_err(
            r.policy_input(&q, &mut params).map(|_| ()),
            ErrorKind::Invalid,
            "LR_EINVAL",
            "lr_router_policy_input",
        );
    }
    assert_eq!(r.stats().unwrap(), before);
}
