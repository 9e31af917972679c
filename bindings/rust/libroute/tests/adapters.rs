//! Multi-model fleets and LoRA adapters: InstanceSpec::models and
//! max_adapters, Request::model and adapter, set_adapters, adapters,
//! name_hash, adapter_salt, the adapter columns and counters.

mod common;

use common::*;
use libroute::*;
use std::collections::HashSet;

/// Two instances of "llama", one of "qwen" (with an alias).
fn fleet(policy: Policy, max_adapters: u32) -> Router {
    let (r, _) = router(policy, &[]);
    for (name, models) in [
        ("a:8000", &["llama"][..]),
        ("b:8000", &["llama"][..]),
        ("c:8000", &["qwen", "qwen-latest"][..]),
    ] {
        let mut s = InstanceSpec::new(name);
        s.models = models;
        s.max_adapters = max_adapters;
        r.add_instance(&s).unwrap();
    }
    r
}

fn req<'a>(
    id: u64,
    tokens: &'a [u32],
    model: Option<&'a str>,
    adapter: Option<&'a str>,
) -> Request<'a> {
    let mut q = Request::new(id, tokens, SEC);
    q.model = model;
    q.adapter = adapter;
    q
}

#[test]
fn name_hash_and_adapter_salt() {
    assert_eq!(name_hash(""), 0);
    let h = name_hash("sql-lora");
    assert_ne!(h, 0);
    assert_eq!(h, name_hash("sql-lora"));
    assert_ne!(h, name_hash("sql-lora2"));
    assert_ne!(name_hash("a\0b"), name_hash("a"));
    assert_eq!(adapter_salt(1234, 0), 1234);
    let s = adapter_salt(1234, h);
    assert!(s != 1234 && s != 0 && s != adapter_salt(1235, h));
    let p = prompt(64, 1);
    assert_ne!(
        block_keys(16, &p, s).unwrap(),
        block_keys(16, &p, 1234).unwrap()
    );
}

#[test]
fn routes_go_to_the_model_instances() {
    let r = fleet(Policy::LEAST_REQUEST, 0);
    for i in 0..12 {
        let p = prompt(40, i);
        let d = r.route(&req(i, &p, Some("llama"), None)).unwrap();
        assert!(d.instance <= 1, "{d:?}");
    }
    for (i, m) in ["qwen", "qwen-latest"].iter().enumerate() {
        let p = prompt(40, 1);
        let d = r.route(&req(100 + i as u64, &p, Some(m), None)).unwrap();
        assert_eq!(d.instance, 2);
    }
    let mut seen = HashSet::new();
    for i in 200..230 {
        let p = prompt(40, i);
        let model = if i % 2 == 0 { None } else { Some("") };
        seen.insert(r.route(&req(i, &p, model, None)).unwrap().instance);
    }
    assert_eq!(seen.len(), 3);
    let p = prompt(40, 1);
    let rows = r.candidates(&req(0, &p, Some("llama"), None)).unwrap();
    assert_eq!(rows.iter().map(|c| c.instance).collect::<Vec<_>>(), [0, 1]);
    let mut params = Vec::new();
    let input = r
        .policy_input(&req(0, &p, Some("qwen"), Some("x")), &mut params)
        .unwrap();
    assert_eq!(input.prompt_tokens, 40);
}

#[test]
fn model_errors() {
    let r = fleet(Policy::LEAST_REQUEST, 0);
    let p = prompt(40, 1);
    want_err(
        r.route(&req(1, &p, Some("gpt-9"), None)),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_router_route",
    );
    want_err(
        r.candidates(&req(1, &p, Some("gpt-9"), None)),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_router_candidates",
    );
    let long = "m".repeat(MAX_NAME as usize + 1);
    let huge = "a".repeat(4000);
    for q in [
        req(1, &p, Some(&long), None),
        req(1, &p, None, Some(&long)),
        req(1, &p, None, Some(&huge)),
        req(1, &p, Some("a\0b"), None),
    ] {
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
            r.policy_input(&q, &mut params),
            ErrorKind::Invalid,
            "LR_EINVAL",
            "lr_router_policy_input",
        );
    }
    let longest = "m".repeat(MAX_NAME as usize);
    want_err(
        r.route(&req(1, &p, Some(&longest), None)),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_router_route",
    );
    r.drain_instance(2, true).unwrap();
    want_err(
        r.route(&req(1, &p, Some("qwen"), None)),
        ErrorKind::State,
        "LR_ESTATE",
        "lr_router_route",
    );
    let st = r.stats().unwrap();
    assert_eq!((st.routes, st.inflight), (0, 0));

    const ADD: &str = "lr_router_add_instance";
    let empty = [""];
    let nul = ["a\0b"];
    let longs = [long.as_str()];
    let many: Vec<String> = (0..=MAX_MODELS).map(|i| format!("m{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    for models in [&empty[..], &nul[..], &longs[..], &many[..]] {
        let mut s = InstanceSpec::new("x");
        s.models = models;
        want_err(r.add_instance(&s), ErrorKind::Invalid, "LR_EINVAL", ADD);
    }
    let mut s = InstanceSpec::new("x");
    s.max_adapters = MAX_ADAPTERS + 1;
    want_err(r.add_instance(&s), ErrorKind::Range, "LR_ERANGE", ADD);
    assert_eq!(r.instance_count(), 3);
    s.max_adapters = MAX_ADAPTERS;
    s.models = &many[..MAX_MODELS as usize];
    r.add_instance(&s).unwrap();
}

#[test]
fn routes_make_adapters_resident() {
    let r = fleet(Policy::AIBRIX_LORA, 2);
    let p = prompt(40, 1);
    let d = r.route(&req(1, &p, Some("llama"), Some("sql"))).unwrap();
    assert!(d.instance <= 1);
    assert_eq!(r.adapters(d.instance).unwrap(), [name_hash("sql")]);
    assert!(r.adapters(2).unwrap().is_empty());
    let p2 = prompt(40, 2);
    let d2 = r.route(&req(2, &p2, Some("llama"), Some("sql"))).unwrap();
    assert_eq!(d2.instance, d.instance);
    assert_eq!(d2.reason, Reason::ADAPTER);
    let st = r.stats().unwrap();
    assert_eq!((st.adapter_routes, st.adapter_loads), (2, 1));
    r.route(&req(3, &p2, Some("llama"), None)).unwrap();
    assert_eq!(r.stats().unwrap().adapter_routes, 2);
}

#[test]
fn set_adapters_and_candidate_columns() {
    let r = fleet(Policy::AIBRIX_LORA, 4);
    let running = ["sql", "chat"];
    let waiting = ["code"];
    r.set_adapters(1, &AdapterStats::new(&running, &waiting, SEC))
        .unwrap();
    let got: HashSet<u64> = r.adapters(1).unwrap().into_iter().collect();
    let want: HashSet<u64> = ["sql", "chat", "code"]
        .iter()
        .map(|n| name_hash(n))
        .collect();
    assert_eq!(got, want);
    let p = prompt(40, 1);
    let rows = r
        .candidates(&req(0, &p, Some("llama"), Some("code")))
        .unwrap();
    let load = r.param(Param::ADAPTER_LOAD_S).unwrap();
    assert_eq!(rows[1].adapter_missing, 0);
    assert_eq!(rows[1].adapter_load_s, 0.0);
    assert_eq!(rows[1].adapters_resident, 3);
    assert_eq!(rows[0].adapter_missing, 1);
    assert_eq!(rows[0].adapter_free, 4);
    assert_eq!(rows[0].adapter_load_s, load);
    assert_eq!(rows[0].adapter_evicts, 0);
    let d = r.route(&req(1, &p, Some("llama"), Some("code"))).unwrap();
    assert_eq!(d.instance, 1);
    assert_eq!(r.stats().unwrap().adapter_loads, 0);
    let chat = ["chat"];
    let mut s = AdapterStats::new(&chat, &[], 2 * SEC);
    s.max_adapters = 1;
    r.set_adapters(1, &s).unwrap();
    assert_eq!(r.adapters(1).unwrap()[0], name_hash("chat"));
}

#[test]
fn set_adapters_errors() {
    let r = fleet(Policy::LEAST_REQUEST, 0);
    const OP: &str = "lr_router_set_adapters";
    let long = "x".repeat(MAX_NAME as usize + 1);
    let many: Vec<String> = (0..=MAX_ADAPTERS).map(|i| format!("a{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let empty = [""];
    let longs = [long.as_str()];
    let nul = ["a\0"];
    for names in [&empty[..], &longs[..], &nul[..], &many[..]] {
        want_err(
            r.set_adapters(0, &AdapterStats::new(names, &[], SEC)),
            ErrorKind::Invalid,
            "LR_EINVAL",
            OP,
        );
        want_err(
            r.set_adapters(0, &AdapterStats::new(&[], names, SEC)),
            ErrorKind::Invalid,
            "LR_EINVAL",
            OP,
        );
    }
    let mut s = AdapterStats::new(&[], &[], SEC);
    s.max_adapters = MAX_ADAPTERS + 1;
    want_err(r.set_adapters(0, &s), ErrorKind::Range, "LR_ERANGE", OP);
    want_err(
        r.set_adapters(9, &AdapterStats::new(&["a"], &[], SEC)),
        ErrorKind::NotFound,
        "LR_ENOENT",
        OP,
    );
    want_err(
        r.adapters(9),
        ErrorKind::NotFound,
        "LR_ENOENT",
        "lr_router_adapters",
    );
    assert!(r.adapters(0).unwrap().is_empty());
    r.set_adapters(0, &AdapterStats::new(&[], &[], SEC))
        .unwrap();

    // More resident than the first buffer holds.
    let (r, _) = router(Policy::LEAST_REQUEST, &[]);
    let mut spec = InstanceSpec::new("a");
    spec.max_adapters = 64;
    r.add_instance(&spec).unwrap();
    let names: Vec<String> = (0..40).map(|i| format!("lora-{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    r.set_adapters(0, &AdapterStats::new(&names, &[], SEC))
        .unwrap();
    assert_eq!(r.adapters(0).unwrap().len(), 40);
}

#[test]
fn adapters_key_prefixes_apart() {
    let (r, _) = router(Policy::PREFIX_CACHE_AND_LOAD, &names(4));
    let p = prompt(256, 3);
    let d = r.route(&req(1, &p, None, Some("sql"))).unwrap();
    r.complete(1, 1, SEC + 1).unwrap();
    let mut q = req(2, &p, None, Some("sql"));
    q.now_ns = 2 * SEC;
    q.flags = RouteFlags::DRY_RUN;
    let hit = r.route(&q).unwrap();
    assert_eq!(hit.instance, d.instance);
    assert!(hit.cached_tokens > 0);
    for adapter in [None, Some("chat")] {
        q.adapter = adapter;
        assert_eq!(r.route(&q).unwrap().cached_tokens, 0, "{adapter:?}");
    }
}

#[test]
fn decide_lora_affinity() {
    let mut rows = [Candidate::new(0), Candidate::new(1), Candidate::new(2)];
    assert_eq!(rows[1].adapter_free, u32::MAX);
    rows[0].adapter_missing = 1;
    rows[0].adapter_free = 0;
    rows[0].adapter_load_s = 0.1;
    rows[2].adapter_missing = 1;
    rows[2].adapter_free = 2;
    rows[2].adapter_load_s = 0.1;
    let input = PolicyInput::new(10);
    let d = decide(Policy::LORA_AFFINITY, &input, &rows).unwrap();
    assert_eq!((d.instance, d.reason), (1, Reason::ADAPTER));
    rows[1].adapter_missing = 2;
    want_err(
        decide(Policy::LORA_AFFINITY, &input, &rows),
        ErrorKind::Invalid,
        "LR_EINVAL",
        "lr_policy_decide",
    );
    assert_eq!(Policy::LORA_AFFINITY.name(), Some("lora-affinity"));
    assert_eq!(Policy::AIBRIX_LORA.name(), Some("aibrix-lora"));
    assert_eq!(Reason::ADAPTER.name(), Some("adapter"));
    assert_eq!(Param::ADAPTER_LOAD_S.bounds().unwrap().default, 0.1);
}
