//! Predictions keep their properties: more hardware is never slower, nothing beats the
//! roofline, the chosen path is the fastest valid one, the datapath facts of hardware.md
//! hold, every recipe steps, and calibration stays within the committed error.

use super::*;

const SHAPES: [(u64, u64, u64); 6] = [
    (8192, 8192, 8192),
    (8192, 6144, 4096),
    (4096, 14336, 16384),
    (1600, 1600, 2048),
    (512, 128256, 4096),
    (15872, 12288, 4096),
];

fn scaled(h: &Hw, bw: f64, flops: f64) -> Hw {
    let mut h = h.clone();
    h.hbm_bps *= bw;
    h.l2_bps *= bw;
    h.link_bps *= bw;
    h.vector_ops *= flops;
    h.sfu *= flops;
    for k in &mut h.kinds {
        k.flops *= flops;
    }
    h
}

#[test]
fn more_bandwidth_or_flops_is_never_slower() {
    let model = ModelSpec::preset("llama3-8b").unwrap();
    let moe = ModelSpec::preset("moe-8b").unwrap();
    for n in names() {
        let base = hw(n);
        for (bw, fl) in [(1.5, 1.0), (1.0, 1.5), (2.0, 2.0)] {
            let more = scaled(&base, bw, fl);
            for f in FORMAT_NAMES {
                let op = Operand::named(f).unwrap();
                for (m, nn, k) in SHAPES {
                    let s = Shape::new(m, nn, k);
                    let t0 = choose(&base, &s, &op, &op, 2.0).total_s();
                    let t1 = choose(&more, &s, &op, &op, 2.0).total_s();
                    assert!(
                        t1 <= t0 * (1.0 + 1e-12),
                        "{n} {f} {m}x{nn}x{k}: {t1} > {t0}"
                    );
                }
            }
            for r in PRESETS {
                let rec = Recipe::preset(r).unwrap();
                for mdl in [&model, &moe] {
                    let cfg = StepConfig {
                        dp: 8,
                        ..StepConfig::default()
                    };
                    let t0 = step(&base, mdl, &rec, &cfg).unwrap().step_time_s;
                    let t1 = step(&more, mdl, &rec, &cfg).unwrap().step_time_s;
                    assert!(t1 <= t0 * (1.0 + 1e-12), "{n} {r}: {t1} > {t0}");
                }
            }
        }
    }
}

#[test]
fn no_prediction_beats_the_roofline() {
    for n in names() {
        let h = hw(n);
        let peak = h.kinds.iter().map(|k| k.flops).fold(0.0, f64::max);
        for f in FORMAT_NAMES {
            let op = Operand::named(f).unwrap();
            for (m, nn, k) in SHAPES {
                let s = Shape::new(m, nn, k);
                let p = choose(&h, &s, &op, &op, 2.0);
                let kind_peak = h.kinds[p.kind].flops;
                assert!(
                    p.gemm_s >= s.flops() / kind_peak,
                    "{n} {f}: beats its kind's peak"
                );
                assert!(p.gemm_s >= s.flops() / peak);
                // Each operand crosses HBM at least once, at its narrowest exact size.
                let min_bytes = (s.m * s.k + s.n * s.k) * op.elem.bytes() + s.m * s.n * 2.0;
                assert!(p.gemm_s >= min_bytes / h.hbm_bps, "{n} {f}: beats HBM");
            }
        }
        let model = ModelSpec::preset("llama3-8b").unwrap();
        for r in PRESETS {
            let rec = Recipe::preset(r).unwrap();
            let cfg = StepConfig::default();
            let res = step(&h, &model, &rec, &cfg).unwrap();
            let flops =
                model.train_flops_per_token(model.seq_len as f64) * cfg.tokens_per_gpu as f64;
            assert!(res.step_time_s >= flops / peak, "{n} {r}: step beats peak");
        }
    }
}

#[test]
fn chosen_kind_is_the_fastest_valid_one() {
    for n in names() {
        for natives in [vec![], vec!["ue5m3", "e1m2", "int4"]] {
            let h = with(n, &natives);
            for fa in FORMAT_NAMES {
                for fb in ["bf16", "nvfp4", "mxfp4", "fp8", "e1m2"] {
                    let (a, b) = (Operand::named(fa).unwrap(), Operand::named(fb).unwrap());
                    for (m, nn, k) in SHAPES {
                        let s = Shape::new(m, nn, k);
                        let best = choose(&h, &s, &a, &b, 2.0);
                        let all = candidates(&h, &s, &a, &b, 2.0);
                        assert!(!all.is_empty());
                        for c in &all {
                            assert!(
                                best.total_s() <= c.total_s() * (1.0 + 1e-12),
                                "{n} {fa}x{fb}: {} beats chosen {}",
                                h.kinds[c.kind].name,
                                h.kinds[best.kind].name
                            );
                        }
                        assert!(all.iter().any(|c| c.kind == best.kind));
                    }
                }
            }
        }
    }
}

fn kind_of(h: &Hw, f: &str) -> (String, Conv, Elem) {
    let op = Operand::named(f).unwrap();
    let p = choose(h, &Shape::new(8192, 8192, 8192), &op, &op, 2.0);
    (h.kinds[p.kind].name.clone(), p.a.conv, p.a.container)
}

#[test]
fn datapath_facts_from_hardware_md() {
    // E1M2 with UE8M0/32: FP6 E2M3 at the FP8 rate on Blackwell, at the FP4 rate on CDNA4.
    assert_eq!(
        kind_of(&hw("b300"), "mxe1m2"),
        ("mxf8f6f4".into(), Conv::None, Elem::E2m3)
    );
    assert_eq!(
        kind_of(&hw("mi355x"), "mxe1m2"),
        ("f6f4".into(), Conv::None, Elem::E2m3)
    );
    // NVFP4 native on Blackwell, emulated on CDNA4 (no E4M3 scales) and Hopper.
    assert_eq!(kind_of(&hw("b200"), "nvfp4").0, "mxf4nvf4");
    assert_eq!(
        kind_of(&hw("mi355x"), "nvfp4"),
        ("bf16".into(), Conv::Dequant, Elem::Bf16)
    );
    assert_eq!(kind_of(&hw("h100"), "nvfp4").1, Conv::Dequant);
    // MXFP4 on Hopper: UE8M0 folded into a row-scaled FP8 GEMM.
    assert_eq!(
        kind_of(&hw("h200"), "mxfp4"),
        ("fp8".into(), Conv::FoldPow2, Elem::E4m3)
    );
    // UE5M3 without native support: re-encoded as E4M3 + tensor scale on Blackwell.
    assert_eq!(
        kind_of(&hw("b200"), "ue5m3"),
        ("mxf4nvf4".into(), Conv::ScaleToE4m3, Elem::E2m1)
    );
    assert_eq!(
        kind_of(&with("b200", &["ue5m3"]), "ue5m3"),
        ("native-ue5m3".into(), Conv::None, Elem::E2m1)
    );
    // UFP4 (E1M2 + E4M3/16) has no native path anywhere until E1M2 is native.
    assert_eq!(kind_of(&hw("b300"), "ufp4").1, Conv::Dequant);
    assert_eq!(
        kind_of(&with("b300", &["e1m2"]), "ufp4"),
        ("native-e1m2".into(), Conv::None, Elem::E1m2)
    );
    assert_eq!(
        kind_of(&with("mi355x", &["e1m2", "ue4m3"]), "ufp4").0,
        "native-e1m2"
    );
    // FP4 : FP8 : BF16 rates.
    let op = |f| Operand::named(f).unwrap();
    let t = |h: &Hw, f| choose(h, &Shape::new(16384, 16384, 16384), &op(f), &op(f), 2.0).gemm_s;
    let b300 = hw("b300");
    assert!(t(&b300, "nvfp4") < t(&b300, "mxfp8") && t(&b300, "mxfp8") < t(&b300, "bf16"));
    let mi = hw("mi355x");
    assert!((t(&mi, "mxe1m2") / t(&mi, "mxfp4") - 1.0).abs() < 0.6);
    assert!(t(&b300, "mxe1m2") > 1.5 * t(&b300, "mxfp4"));
}

#[test]
fn every_recipe_steps_on_every_gpu_and_model() {
    for n in names() {
        let h = hw(n);
        for m in MODELS {
            let model = ModelSpec::preset(m).unwrap();
            for r in PRESETS {
                let rec = Recipe::preset(r).unwrap();
                let res = step(&h, &model, &rec, &StepConfig::default()).unwrap();
                let sum: f64 = res.breakdown.iter().sum();
                assert!((sum - res.step_time_s).abs() <= 1e-12 * sum);
                assert!(
                    res.breakdown.iter().all(|v| *v >= 0.0 && v.is_finite()),
                    "{n} {m} {r}: {:?}",
                    res.breakdown
                );
                assert!(res.tokens_per_s_per_gpu > 0.0 && res.mfu > 0.0);
                let rep = res.report(&h, &model, &rec, &StepConfig::default());
                assert_eq!(rep.breakdown.len(), CATEGORIES.len());
                assert!(!rep.gemms.is_empty());
            }
        }
    }
}

#[test]
fn recipe_settings_move_the_step_the_right_way() {
    let h = hw("b300");
    let model = ModelSpec::preset("llama3-8b").unwrap();
    let cfg = StepConfig::default();
    let t = |r: &Recipe| step(&h, &model, r, &cfg).unwrap();
    let te = Recipe::preset("nvfp4").unwrap();
    // Fewer BF16-kept blocks, no RHT, no SR: each removes work.
    let all = t(&te.set("keep_bf16_last", "0").unwrap());
    let base = t(&te);
    assert!(all.breakdown[1] < base.breakdown[1]);
    assert!(all.step_time_s < base.step_time_s);
    let no_rht = t(&te.set("rht", "none").unwrap());
    assert_eq!(no_rht.breakdown[5], 0.0);
    assert!(base.breakdown[5] > 0.0 && no_rht.step_time_s < base.step_time_s);
    let no_sr = t(&te.set("sr", "[]").unwrap());
    assert_eq!(no_sr.breakdown[6], 0.0);
    // Periodic tensor scale: no amax passes.
    let ue5m3 = t(&Recipe::preset("ue5m3").unwrap());
    assert_eq!(ue5m3.breakdown[4], 0.0);
    assert!(base.breakdown[4] > 0.0);
    // fp4_layers=mlp leaves attention linears in BF16.
    let mlp = t(&te.set("fp4_layers", "mlp").unwrap());
    assert!(mlp.breakdown[1] > base.breakdown[1]);
    // Natives only ever help.
    for natives in [
        vec!["ue5m3"],
        vec!["e1m2"],
        vec!["sr"],
        vec!["rht"],
        vec!["fused-quant"],
    ] {
        let hn = with("b300", &natives);
        for r in PRESETS {
            let rec = Recipe::preset(r).unwrap();
            let a = step(&h, &model, &rec, &cfg).unwrap().step_time_s;
            let b = step(&hn, &model, &rec, &cfg).unwrap().step_time_s;
            assert!(b <= a * (1.0 + 1e-12), "{natives:?} {r}: {b} > {a}");
        }
    }
    let ufp4 = Recipe::preset("ufp4").unwrap();
    let gain = step(&h, &model, &ufp4, &cfg).unwrap().step_time_s
        / step(&with("b300", &["e1m2"]), &model, &ufp4, &cfg)
            .unwrap()
            .step_time_s;
    assert!(
        gain > 1.3,
        "native e1m2 should lift UFP4 off emulation, gain {gain}"
    );
}

#[test]
fn data_parallel_comm_is_exposed_only_past_overlap() {
    let h = hw("b200");
    let model = ModelSpec::preset("llama3-8b").unwrap();
    let rec = Recipe::preset("bf16").unwrap();
    let one = step(&h, &model, &rec, &StepConfig::default()).unwrap();
    assert_eq!(one.breakdown[10], 0.0);
    let none = StepConfig {
        dp: 64,
        comm_overlap: 0.0,
        ..StepConfig::default()
    };
    let full = StepConfig {
        dp: 64,
        comm_overlap: 1.0,
        ..StepConfig::default()
    };
    let a = step(&h, &model, &rec, &none).unwrap();
    let b = step(&h, &model, &rec, &full).unwrap();
    assert!(a.breakdown[10] > 0.0 && b.breakdown[10] < a.breakdown[10]);
    assert!(a.breakdown[9] < one.breakdown[9]); // ZeRO-1 shards the optimizer
    let bad = StepConfig {
        tokens_per_gpu: 1000,
        ..StepConfig::default()
    };
    assert!(step(&h, &model, &rec, &bad).is_err());
}

#[test]
fn ops_cover_each_class() {
    let h = hw("h200");
    let copy = op_time(
        &h,
        &parse_op(r#"{"op": "copy", "bytes": 2147483648}"#).unwrap(),
    )
    .unwrap();
    assert_eq!(copy.bound, "memory");
    let g = op_time(&h, &parse_op(r#"{"op": "gemm", "m": 4096, "n": 4096, "k": 4096, "a": "bf16", "b": {"element": "e4m3", "scale": "fp32", "block": 0, "rule": "te"}}"#).unwrap()).unwrap();
    assert_eq!(g.kind.as_deref(), Some("bf16"));
    let q = op_time(&h, &parse_op(r#"{"op": "quantize", "numel": 67108864, "outputs": [{"format": "nvfp4"}, {"format": "nvfp4", "rht": 16, "sr": true}]}"#).unwrap()).unwrap();
    assert!(q.detail["rht_s"] > 0.0 && q.detail["sr_s"] > 0.0 && q.detail["amax_s"] > 0.0);
    let a = op_time(&h, &parse_op(r#"{"op": "attention", "batch": 2, "seq": 8192, "heads": 32, "kv_heads": 8, "head_dim": 128, "backward": true}"#).unwrap()).unwrap();
    assert!(a.detail["bwd_s"] > a.detail["fwd_s"]);
    let f8 = op_time(&h, &parse_op(r#"{"op": "attention", "batch": 2, "seq": 8192, "heads": 32, "kv_heads": 8, "head_dim": 128, "precision": "fp8"}"#).unwrap()).unwrap();
    assert!(f8.time_s < a.detail["fwd_s"]);
    let mi = hw("mi355x");
    let bf = op_time(&mi, &parse_op(r#"{"op": "attention", "batch": 1, "seq": 4096, "heads": 8, "kv_heads": 8, "head_dim": 128, "precision": "fp4"}"#).unwrap());
    assert!(bf.is_err());
    // MXFP8 cannot fold its scales into FP8 on Hopper (its block spans E4M3's range): emulated.
    let mx8 = Operand::named("mxfp8").unwrap();
    let p = choose(&h, &Shape::new(4096, 4096, 4096), &mx8, &mx8, 2.0);
    assert_eq!(p.a.conv, Conv::Dequant);
    assert!(parse_op(r#"{"op": "fft"}"#).is_err());
    assert!(gemm(
        &h,
        &Shape::new(0, 1, 1),
        &Operand::BF16,
        &Operand::BF16,
        2.0
    )
    .is_err());
}

/// The calibration cases (benchmarks/calibration/cases.json, written by fit.py) stay
/// within the error committed in benchmarks/calibration/fitted.json.
#[test]
fn calibration_cases_stay_within_committed_error() {
    let cases: Value = serde_json::from_str(include_str!(
        "../../../../../benchmarks/calibration/cases.json"
    ))
    .unwrap();
    let fitted: Value = serde_json::from_str(include_str!(
        "../../../../../benchmarks/calibration/fitted.json"
    ))
    .unwrap();
    let cases = cases["cases"].as_array().unwrap();
    assert!(cases.len() >= 20);
    let mut errors = vec![];
    for c in cases {
        let id = c["id"].as_str().unwrap();
        let h = hw(c["hw"].as_str().unwrap());
        let mut t = 0.0;
        for op in c["ops"].as_array().unwrap() {
            t += op_time(&h, &serde_json::from_value(op.clone()).unwrap())
                .unwrap()
                .time_s;
        }
        let measured = c["measured_s"].as_f64().unwrap();
        let err = (t - measured) / measured;
        let tol = fitted["cases"][id]["tolerance"]
            .as_f64()
            .unwrap_or_else(|| panic!("{id}: no committed tolerance"));
        assert!(err.abs() <= tol, "{id}: error {err:.4} > committed {tol}");
        errors.push(err.abs());
    }
    errors.sort_by(f64::total_cmp);
    let median = errors[errors.len() / 2];
    assert!(median <= 0.10, "median calibration error {median}");
}

fn attn(h: &Hw, batch: f64, seq: f64, head_dim: f64) -> (f64, f64) {
    let s = crate::hw::attention::AttnShape {
        batch,
        seq,
        heads: 16.0,
        kv_heads: 16.0,
        head_dim,
        causal: true,
        fp8: false,
    };
    let (f, b, _) = crate::hw::attention::attention_time(h, &s).unwrap();
    let rate = h.bf16_peak() * h.eff.attention;
    // Never below the FLOP roofline at the sustained rate (plus the launch).
    assert!(
        f >= s.fwd_flops() / rate + h.eff.launch_s,
        "fwd below roofline"
    );
    assert!(
        b >= 2.5 * s.fwd_flops() / rate + h.eff.launch_s,
        "bwd below roofline"
    );
    (f, b)
}

#[test]
fn attention_tile_cost_is_monotone_and_fades_at_long_sequences() {
    for name in ["h200", "b200", "mi355x"] {
        let h = hw(name);
        let mut last = (0.0, 0.0);
        for seq in [128.0, 512.0, 1024.0, 4096.0, 8192.0] {
            let t = attn(&h, 8.0, seq, 64.0);
            assert!(t.0 > last.0 && t.1 > last.1, "{name} monotone in seq");
            last = t;
        }
        let mut last = 0.0;
        for batch in [1.0, 4.0, 32.0, 128.0] {
            let t = attn(&h, batch, 2048.0, 128.0).0;
            assert!(t >= last, "{name} monotone in batch");
            last = t;
        }
    }
    // Short, small-head attention pays the fixed tile cost; at LLM shapes it stays small.
    let h = hw("h200");
    let roof = |seq: f64, d: f64| {
        let flops = 4.0 * 32.0 * seq * seq * 16.0 * d / 2.0;
        flops / (h.bf16_peak() * h.eff.attention)
    };
    assert!(attn(&h, 32.0, 512.0, 64.0).0 > 2.0 * roof(512.0, 64.0));
    assert!(attn(&h, 32.0, 8192.0, 128.0).0 < 1.2 * roof(8192.0, 128.0));
}

fn gemm_op(m: u64, n: u64, k: u64, imp: &str) -> String {
    format!(r#"{{"op": "gemm", "m": {m}, "n": {n}, "k": {k}{imp}}}"#)
}

#[test]
fn eager_gemm_adds_a_fixed_cost_and_runs_at_the_eager_clock_only_when_asked() {
    let base = hw("h200");
    let e = base.emulation.unwrap();
    let time = |h: &Hw, m: u64, imp: &str| {
        op_time(h, &parse_op(&gemm_op(m, 640, 640, imp)).unwrap())
            .unwrap()
            .time_s
    };
    let eager = r#", "impl": "torch-eager""#;
    // At the nominal clock the tag adds exactly the per-call cost (8 us here; the fitted
    // value may be 0).
    let mut h = base.clone();
    h.emulation = Some(EmulCost {
        eager_call_s: 8e-6,
        eager_clock_hz: h.clock_hz,
        ..e
    });
    let mut last = 0.0;
    for m in [256, 4096, 16384, 65536] {
        assert!((time(&h, m, eager) - time(&h, m, "") - 8e-6).abs() < 1e-12);
        assert!(time(&h, m, eager) > last);
        last = time(&h, m, eager);
    }
    // A faster eager clock shortens a compute-bound kernel by the clock ratio (cycles are
    // the same), never below the HBM roofline; untagged GEMMs keep the nominal clock.
    assert!(
        e.eager_clock_hz > base.clock_hz,
        "h200.toml sets the eager GEMM clock"
    );
    let (m, n, k) = (16384, 4096, 4096);
    let plain = op_time(&base, &parse_op(&gemm_op(m, n, k, "")).unwrap()).unwrap();
    let fast = op_time(&base, &parse_op(&gemm_op(m, n, k, eager)).unwrap()).unwrap();
    assert_eq!(plain.bound, "compute");
    let launch = base.eff.launch_s;
    let want = (plain.detail["gemm_s"] - launch) * base.clock_hz / e.eager_clock_hz + launch;
    assert!((fast.detail["gemm_s"] - want).abs() < 1e-12 * want.max(1.0));
    // Targets have no [emulation] table: asking for it there is an error, not a guess.
    let op = parse_op(&gemm_op(64, 64, 64, eager)).unwrap();
    assert!(op_time(&hw("b200"), &op).is_err());
}

#[test]
fn split_k_fills_the_sms_from_few_tiles() {
    // A weight-gradient GEMM with few output tiles and a long K (768x768 from 32768
    // tokens: 18 tiles of 128x256 on 132 SMs) splits K until the tiles fill one wave.
    let h = hw("h200");
    let s = Shape::new(768, 768, 32768);
    let r = gemm(&h, &s, &Operand::BF16, &Operand::BF16, 2.0).unwrap();
    let tiles = (768 / r.tile[0]) * (768 / r.tile[1]);
    assert!(r.split > 4, "split {}", r.split);
    assert!(tiles * r.split <= h.sms as u32 && tiles * (r.split + 1) > h.sms as u32);
    // Many tiles: no split (the calibration shapes never split).
    let big = gemm(
        &h,
        &Shape::new(8192, 4096, 14336),
        &Operand::BF16,
        &Operand::BF16,
        2.0,
    )
    .unwrap();
    assert_eq!(big.split, 1);
}
