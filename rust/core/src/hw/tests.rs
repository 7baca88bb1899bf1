//! Properties the model must keep: files load or fail with file and line, more hardware
//! is never slower, nothing beats the roofline, the chosen path is the fastest valid
//! one, the datapath facts of hardware.md hold, and calibration stays within the
//! committed error.

use serde_json::Value;

use super::datapath::{candidates, choose, Conv};
use super::gemm::Shape;
use super::machine::{EmulCost, Hw};
use super::model::{ModelSpec, MODELS};
use super::native;
use super::operand::{Elem, Operand, FORMAT_NAMES};
use super::ops::{gemm, op_time, parse_op, QUANT_REV};
use super::profile::{names, Profile};
use super::step::{step, StepConfig, CATEGORIES};
use crate::error::{Domain, Error};
use crate::recipe::{Recipe, PRESETS};

fn hw(name: &str) -> Hw {
    Hw::from_profile(&Profile::load(name).unwrap())
}

/// The `"quant_rev"` field an emulated quantize op's JSON ends with (after its outputs).
fn quant_rev(rev: u32) -> String {
    format!(r#", "quant_rev": {rev}"#)
}

fn with(name: &str, natives: &[&str]) -> Hw {
    let list: Vec<String> = natives.iter().map(|s| s.to_string()).collect();
    hw(name)
        .with_natives(&native::parse(&list).unwrap())
        .unwrap()
}

const SHAPES: [(u64, u64, u64); 6] = [
    (8192, 8192, 8192),
    (8192, 6144, 4096),
    (4096, 14336, 16384),
    (1600, 1600, 2048),
    (512, 128256, 4096),
    (15872, 12288, 4096),
];

#[test]
fn every_builtin_loads_with_sources() {
    assert_eq!(names().len(), 9);
    for n in names() {
        let p = Profile::load(n).unwrap();
        assert_eq!(p.name, n);
        let text = p.to_json();
        assert!(!text.contains("\"source\":\"\""), "{n} has an empty source");
        let back = Profile::from_json_str(&text, "mem").unwrap();
        assert_eq!(p, back);
    }
    assert!(Profile::load("rubin").unwrap().preliminary);
}

#[test]
fn unknown_hardware_lists_valid_names() {
    let err = Profile::load("h300").unwrap_err();
    assert_eq!(err.domain(), Domain::Hardware);
    let msg = err.to_string();
    assert!(msg.contains("b200") && msg.contains("mi355x"), "{msg}");
}

#[test]
fn malformed_file_names_file_and_line() {
    let text = crate::hw::profile::BUILTIN[2].1.replacen(
        "vendor = \"nvidia\"",
        "vendor = = \"nvidia\"",
        1,
    );
    let line = text.lines().position(|l| l.contains("vendor = =")).unwrap() + 1;
    let err = Profile::from_toml_str(&text, "mine.toml").unwrap_err();
    assert!(matches!(err, Error::Config { .. }), "{err:?}");
    assert!(
        err.to_string().starts_with(&format!("mine.toml:{line}:")),
        "{err}"
    );
}

#[test]
fn impossible_values_are_rejected_with_line() {
    let base = crate::hw::profile::BUILTIN[2].1;
    for (from, field) in [
        ("hbm_tbs = { value = 8.0", "hbm_tbs = { value = -8.0"),
        ("sms = { value = 148", "sms = { value = 0"),
    ] {
        let text = base.replacen(from, field, 1);
        assert_ne!(text, base);
        let line = text.lines().position(|l| l.starts_with(field)).unwrap() + 1;
        let err = Profile::from_toml_str(&text, "bad.toml").unwrap_err();
        assert_eq!(err.domain(), Domain::Hardware, "{err}");
        assert!(
            err.to_string().starts_with(&format!("bad.toml:{line}:")),
            "{err}"
        );
        assert!(err.to_string().contains("must be > 0"), "{err}");
    }
    let text = base.replacen("mma_fp4 = { value = ", "mma_fp4 = { value = 1", 1);
    let err = Profile::from_toml_str(&text, "bad.toml").unwrap_err();
    assert!(err.to_string().contains("efficiency.mma_fp4"), "{err}");
    let text = base.replacen("confidence = \"vendor\"", "confidence = \"rumour\"", 1);
    assert!(Profile::from_toml_str(&text, "bad.toml").is_err());
}

#[test]
fn set_overrides_and_validates() {
    let p = Profile::load("rubin").unwrap();
    let q = p.set("mma.mxf4nvf4.tflops", "50000").unwrap();
    let k = q.mma.iter().find(|k| k.name == "mxf4nvf4").unwrap();
    assert_eq!(k.tflops.value, 50000.0);
    assert_eq!(k.tflops.confidence, "preliminary");
    assert_eq!(
        p.set("memory.hbm_tbs", "30").unwrap().memory.hbm_tbs.value,
        30.0
    );
    assert!(p.set("memory.hbm_tbs", "-1").is_err());
    assert!(p.set("memory.nope", "1").is_err());
    assert!(p.set("efficiency.mma_fp4", "1.5").is_err());
}

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
fn natives_parse_and_reject() {
    let n = native::parse(&["ue5m3@0.5,e1m2".into(), "none".into()]).unwrap();
    assert_eq!(n.len(), 2);
    assert_eq!(n[0].rate, 0.5);
    let err = native::parse(&["ue6m2".into()]).unwrap_err();
    assert!(err.to_string().contains("fused-quant"), "{err}");
    assert!(native::parse(&["sr@2".into()]).is_err());
    assert!(native::parse(&["e1m2@0".into()]).is_err());
    assert!(native::parse(&["e1m2,e1m2".into()]).is_err());
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
fn model_files_parse_or_name_the_line() {
    let m = ModelSpec::parse("name = \"tiny\"\nlayers = 2\nhidden = 256\nheads = 4\nkv_heads = 4\nffn = 512\nvocab = 1000\n", "t.toml").unwrap();
    assert_eq!(m.head_dim(), 64);
    let err = ModelSpec::parse("name = \"tiny\"\nlayers = = 2\n", "t.toml").unwrap_err();
    assert!(err.to_string().starts_with("t.toml:2:"), "{err}");
    let err = ModelSpec::parse("{\"name\": \"x\", \"layers\": 2, \"hidden\": 256, \"heads\": 3, \"kv_heads\": 2, \"ffn\": 1, \"vocab\": 5}", "m.json").unwrap_err();
    assert!(err.to_string().contains("kv_heads"), "{err}");
    assert!(ModelSpec::load("gpt-9")
        .unwrap_err()
        .to_string()
        .contains("llama3-8b"));
    let moe = ModelSpec::preset("moe-8b").unwrap();
    assert!(
        (7.5e9..8.5e9).contains(&moe.total_params()),
        "{}",
        moe.total_params()
    );
    let l8 = ModelSpec::preset("llama3-8b").unwrap();
    assert!(
        (7.9e9..8.2e9).contains(&l8.total_params()),
        "{}",
        l8.total_params()
    );
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
        "../../../../benchmarks/calibration/cases.json"
    ))
    .unwrap();
    let fitted: Value = serde_json::from_str(include_str!(
        "../../../../benchmarks/calibration/fitted.json"
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

fn triton_quant(numel: f64, rht: u32, imp: Option<&str>) -> String {
    let imp = imp.map_or(String::new(), |i| format!(r#", "impl": "{i}""#));
    format!(
        r#"{{"op": "quantize", "numel": {numel}, "outputs": [{{"format": "nvfp4", "rht": {rht}}}, {{"format": "nvfp4", "rht": {rht}, "transposed_copy": true}}]{imp}}}"#
    )
}

#[test]
fn emulated_quantizer_is_monotone_and_never_below_vendor_price() {
    let h = hw("h200");
    let mut last = 0.0;
    for numel in [1e3, 1e5, 1e6, 1e7, 3e7, 1e8, 1e9] {
        for rht in [0, 16] {
            let vendor = op_time(&h, &parse_op(&triton_quant(numel, rht, None)).unwrap()).unwrap();
            let emul = op_time(
                &h,
                &parse_op(&triton_quant(numel, rht, Some("fourcast-triton"))).unwrap(),
            )
            .unwrap();
            assert!(emul.time_s >= vendor.time_s, "{numel} {rht}");
            assert!(emul.detail.contains_key("emulation_s"));
            if rht == 0 {
                assert!(emul.time_s >= last, "monotone in numel at {numel}");
                last = emul.time_s;
            }
        }
    }
    // The per-call cost dominates small passes: a 1k-element pass costs ~ the fixed term.
    let small = op_time(
        &h,
        &parse_op(&triton_quant(1e3, 0, Some("fourcast-triton"))).unwrap(),
    )
    .unwrap();
    assert!(small.time_s >= h.emulation.unwrap().call_s);
}

#[test]
fn emulated_quantizer_prices_each_stochastic_copy() {
    // SR draws one Philox per element and copy: the fitted per-element SR term, no more.
    // (Quantizer revision 9: one tile a strip program, as SR's narrower tile would change
    // the tiles a program takes, and the float sr16 the terms were fitted on.)
    let h = hw("h200");
    let e = h.emulation.unwrap();
    assert!(e.sr_s_per_elem > 0.0, "h200.toml fits an SR term");
    let op = |sr: &str| {
        format!(
            r#"{{"op": "quantize", "numel": 1e7, "impl": "fourcast-triton", "quant_rev": 9, "outputs": [{{"format": "nvfp4", "sr": {sr}}}, {{"format": "nvfp4", "sr": {sr}, "transposed_copy": true}}]}}"#
        )
    };
    let rtne = op_time(&h, &parse_op(&op("false")).unwrap()).unwrap();
    let sr = op_time(&h, &parse_op(&op("true")).unwrap()).unwrap();
    let extra = sr.detail["emulation_s"] - rtne.detail["emulation_s"];
    assert!((extra - 3e7 * e.sr_s_per_elem).abs() <= 1e-12, "{extra}");
    // "sr4" (a Philox per four elements) has its own, smaller term.
    assert!(e.sr4_s_per_elem > 0.0 && e.sr4_s_per_elem < e.sr_s_per_elem);
    let sr4 = op_time(&h, &parse_op(&op(r#"true, "sr4": true"#)).unwrap()).unwrap();
    let extra4 = sr4.detail["emulation_s"] - rtne.detail["emulation_s"];
    assert!((extra4 - 3e7 * e.sr4_s_per_elem).abs() <= 1e-12, "{extra4}");
    // "sr16" (a Philox per sixteen) takes its own term, smaller again (fitted on run 12). An
    // op flagged both ways (run 12's profiles) counts as sr16.
    assert!(e.sr16_s_per_elem > 0.0 && e.sr16_s_per_elem < e.sr4_s_per_elem);
    for flags in [
        r#"true, "sr16": true"#,
        r#"true, "sr4": true, "sr16": true"#,
    ] {
        let sr16 = op_time(&h, &parse_op(&op(flags)).unwrap()).unwrap();
        let extra16 = sr16.detail["emulation_s"] - rtne.detail["emulation_s"];
        assert!(
            (extra16 - 3e7 * e.sr16_s_per_elem).abs() <= 1e-12,
            "{extra16}"
        );
    }
}

/// The H200 model with one field of its file changed.
fn h200_with(path: &str, value: &str) -> Hw {
    h200_with_all(&[(path, value)])
}

fn h200_with_all(terms: &[(&str, &str)]) -> Hw {
    let profile = terms
        .iter()
        .fold(Profile::load("h200").unwrap(), |p, (path, value)| {
            p.set(path, value).unwrap()
        });
    Hw::from_profile(&profile)
}

/// A call's Gluon price at `factor`: `call_s + factor * (its revision-12 strip price - call_s)`.
fn gluon_scaled(hw: &Hw, outs: &str, factor: f64) -> f64 {
    let call_s = hw.emulation.unwrap().call_s;
    let strip = emulated_quant_price(hw, outs, &quant_rev(12));
    call_s + factor * (strip - call_s)
}

/// What an emulation saving `term` at `value` takes off a 32768 x 2304 row+col quantize call
/// (fourcast-triton, amaxes given) with these outputs and extra op fields.
fn emulation_saving(term: &str, value: &str, outs: &str, extra: &str) -> f64 {
    let op = format!(
        r#"{{"op": "quantize", "numel": 75497472, "impl": "fourcast-triton", "refresh": 10, "outputs": [{outs}]{extra}}}"#
    );
    let op = parse_op(&op).unwrap();
    op_time(&h200_with(term, "0.0"), &op).unwrap().detail["emulation_s"]
        - op_time(&h200_with(term, value), &op).unwrap().detail["emulation_s"]
}

#[test]
fn an_emulated_gemm_through_cublaslt_scales_the_eager_kernel_time() {
    // "torch-cublaslt": the eager GEMM at the eager clock, its kernel time times
    // cublaslt_gemm_time_factor; the per-call cost is the eager one.
    let h = h200_with("emulation.cublaslt_gemm_time_factor", "0.8");
    let price = |how: &str| {
        let op = format!(r#"{{"op": "gemm", "m": 8192, "n": 4096, "k": 4096, "impl": "{how}"}}"#);
        op_time(&h, &parse_op(&op).unwrap()).unwrap()
    };
    let (eager, lt) = (price("torch-eager"), price("torch-cublaslt"));
    assert!((lt.detail["gemm_s"] - 0.8 * eager.detail["gemm_s"]).abs() < 1e-15);
    assert_eq!(lt.detail["eager_s"], eager.detail["eager_s"]);
    assert!((lt.time_s - (lt.detail["gemm_s"] + lt.detail["eager_s"])).abs() < 1e-15);
    let h1 = Hw::from_profile(&Profile::load("h100").unwrap());
    assert!(h1.emulation.is_none() || h1.emulation.unwrap().lt_time_factor == 1.0);
}

#[test]
fn emulated_quantizer_prices_its_amax_pass_only_when_it_measures() {
    // One pass over the input when a two-level format measures its tensor amax (refresh 1);
    // none when the amax is given (refresh > 1) or the format has no tensor scale (MX: its
    // amax is recorded in-kernel, priced per tile, 32 x 64 without SR).
    let h = h200_with("emulation.triton_quant_amax_ns_per_elem", "0.0007");
    let e = h.emulation.unwrap();
    assert!((e.amax_s_per_elem - 0.0007e-9).abs() < 1e-18);
    // Revision 12: the strip kernel's terms (13 runs RTNE row+col calls on the Gluon kernel).
    let t = |fmt: &str, refresh: u32| {
        let op = format!(
            r#"{{"op": "quantize", "numel": 1e7, "impl": "fourcast-triton", "refresh": {refresh}, "quant_rev": 12, "outputs": [{{"format": "{fmt}"}}, {{"format": "{fmt}", "transposed_copy": true}}]}}"#
        );
        op_time(&h, &parse_op(&op).unwrap()).unwrap().detail["emulation_s"]
    };
    assert!((t("nvfp4", 1) - t("nvfp4", 10) - 1e7 * e.amax_s_per_elem).abs() <= 1e-12);
    let in_kernel = 1e7 / 2048.0 * e.amax_tile_s;
    assert!((t("mxfp4", 1) - t("mxfp4", 10) - in_kernel).abs() <= 1e-12);
}

#[test]
fn emulated_quantizer_prices_in_kernel_amax_atomics_per_strip_program() {
    // Formats without a tensor scale (MX) record the amax with two atomics per strip program:
    // one tile of 32 x 32 with SR and a 32-wide block, 32 x 64 without SR; two-level formats do not.
    let h = h200_with("emulation.triton_quant_amax_tile_ns", "0.9");
    let zero = h200_with("emulation.triton_quant_amax_tile_ns", "0.0");
    let e = h.emulation.unwrap();
    assert!((e.amax_tile_s - 0.9e-9).abs() < 1e-18);
    // Revision 12: the strip kernel's programs (13 runs RTNE row+col calls on the Gluon kernel).
    let extra = |fmt: &str, sr: bool| {
        let op = format!(
            r#"{{"op": "quantize", "numel": 1048576, "impl": "fourcast-triton", "quant_rev": 12, "outputs": [{{"format": "{fmt}"}}, {{"format": "{fmt}", "sr": {sr}}}]}}"#
        );
        let op = parse_op(&op).unwrap();
        op_time(&h, &op).unwrap().detail["emulation_s"]
            - op_time(&zero, &op).unwrap().detail["emulation_s"]
    };
    assert!((extra("mxfp4", true) - 1024.0 * 0.9e-9).abs() < 1e-15);
    // A 16-row tile without an RHT: four tiles a program (kernels/strip.py's strip_iters)
    // once 4096 programs remain, so 2^25 elements in 32 x 16 tiles make 16384 programs.
    let mx16 = r#"{"element": "e2m1", "scale": "ue8m0", "block": 16, "rule": "floor"}"#;
    let big = format!(
        r#"{{"op": "quantize", "numel": 33554432, "impl": "fourcast-triton", "outputs": [{{"format": {mx16}}}, {{"format": {mx16}, "sr": true}}]}}"#
    );
    let big = parse_op(&big).unwrap();
    let extra16 = op_time(&h, &big).unwrap().detail["emulation_s"]
        - op_time(&zero, &big).unwrap().detail["emulation_s"];
    assert!((extra16 - 16384.0 * 0.9e-9).abs() < 1e-14, "{extra16}");
    // An amax given, or recorded by nobody (the profile says "none"): no atomics.
    let given = r#"{"op": "quantize", "numel": 1048576, "impl": "fourcast-triton", "refresh": 10, "outputs": [{"format": "mxfp4"}, {"format": "mxfp4", "sr": true}]}"#;
    let given = parse_op(given).unwrap();
    assert_eq!(
        op_time(&h, &given).unwrap().detail["emulation_s"],
        op_time(&zero, &given).unwrap().detail["emulation_s"]
    );
    assert!((extra("mxfp4", false) - 512.0 * 0.9e-9).abs() < 1e-15);
    assert_eq!(extra("nvfp4", true), 0.0);
}

#[test]
fn emulated_strip_programs_of_several_tiles_save_per_overlapped_element() {
    // A row+col call on 16-row tiles without an RHT takes up to four tiles a program
    // (kernels/strip.py strip_iters; quantizer revisions from 10, the default 11): ITERS - 1
    // of ITERS tiles overlap, each element of theirs saves the fitted term. One tile a
    // program (revision 9 and before, the kernel of runs up to 14), an RHT, or one copy: no
    // saving.
    let h = h200_with(
        "emulation.triton_quant_prefetch_saving_ns_per_elem",
        "0.0002",
    );
    let zero = h200_with("emulation.triton_quant_prefetch_saving_ns_per_elem", "0.0");
    assert!((h.emulation.unwrap().prefetch_saving_s_per_elem - 0.0002e-9).abs() < 1e-20);
    let saved = |numel: f64, rht: u32, extra: &str, copies: usize| {
        let out = format!(r#"{{"format": "nvfp4", "rht": {rht}}}"#);
        let outs = vec![out; copies].join(", ");
        let op = format!(
            r#"{{"op": "quantize", "numel": {numel}, "impl": "fourcast-triton", "refresh": 10, "outputs": [{outs}]{extra}}}"#
        );
        let op = parse_op(&op).unwrap();
        op_time(&zero, &op).unwrap().detail["emulation_s"]
            - op_time(&h, &op).unwrap().detail["emulation_s"]
    };
    let n = 32768.0 * 2304.0; // 73728 tiles of 16 x 64: four a program
    let rev12 = &quant_rev(12); // the strip kernel's (13 runs these on the Gluon kernel)
    assert!((saved(n, 0, rev12, 2) - 2.0 * n * 0.75 * 0.0002e-9).abs() < 1e-15);
    for rev in [10, 11] {
        let extra = quant_rev(rev);
        assert!((saved(n, 0, &extra, 2) - saved(n, 0, rev12, 2)).abs() < 1e-18);
    }
    for rev in [1, 9] {
        assert_eq!(saved(n, 0, &quant_rev(rev), 2), 0.0);
    }
    assert_eq!(saved(n, 16, "", 2), 0.0);
    assert_eq!(saved(n, 0, rev12, 1), 0.0);
    // 12288 tiles: two a program keep 6144 >= 4096 programs, four would not.
    let m = 12288.0 * 1024.0;
    assert!((saved(m, 0, rev12, 2) - 2.0 * m * 0.5 * 0.0002e-9).abs() < 1e-15);
    // A revision that is none (0, or after the current kernels) is an error, and the old
    // field name is no longer read.
    for rev in [0, QUANT_REV + 1] {
        let bad = format!(
            r#"{{"op": "quantize", "numel": 1e6, "impl": "fourcast-triton", "quant_rev": {rev}, "outputs": [{{"format": "nvfp4"}}, {{"format": "nvfp4"}}]}}"#
        );
        let err = op_time(&h, &parse_op(&bad).unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("quant_rev"), "{err}");
    }
    let old = r#"{"op": "quantize", "numel": 1e6, "impl": "fourcast-triton", "strip_iters": 1, "outputs": [{"format": "nvfp4"}]}"#;
    assert!(parse_op(old).is_err());
}

#[test]
fn emulated_integer_sr16_saves_per_stochastically_rounded_element() {
    // Quantizer revision 11 (session 11, training-h200 run 17 on) rounds "sr16" in
    // integers: each element written with sr16 saves the fitted term, whatever the kernel
    // (the strip kernel's row+col call, or a rotated row copy beside an sr16 column copy).
    // Revisions 10 and before ran the float form: no saving; nor do other roundings. From
    // revision 14 (the default) a row+col sr16 call on blocks of 16 runs the Gluon kernel:
    // the saving scaled by its factor.
    let term = "emulation.triton_quant_sr16_int_saving_ns_per_elem";
    assert!(
        (h200_with(term, "0.0002")
            .emulation
            .unwrap()
            .sr16_int_saving_s_per_elem
            - 0.0002e-9)
            .abs()
            < 1e-20
    );
    let saved = |outs: &str, extra: &str| emulation_saving(term, "0.0002", outs, extra);
    let n = 75497472.0; // 32768 x 2304, a dY call of the 125M model
    let both = r#"{"format": "nvfp4", "sr": true, "sr16": true}, {"format": "nvfp4", "sr": true, "sr16": true}"#;
    let rev13 = &quant_rev(13);
    assert!((saved(both, rev13) - 2.0 * n * 0.0002e-9).abs() < 1e-15);
    assert_eq!(saved(both, &quant_rev(11)), saved(both, rev13));
    let factor = hw("h200").emulation.unwrap().gluon_sr16_time_factor;
    assert!((saved(both, "") - factor * saved(both, rev13)).abs() < 1e-15);
    for rev in [9, 10] {
        assert_eq!(saved(both, &quant_rev(rev)), 0.0);
    }
    // MX's X call: a rotated row copy without SR, an sr16 column copy: the column copy's (on
    // the strip kernel, up to revision 17).
    let x = r#"{"format": "mxfp4", "rht": 32}, {"format": "mxfp4", "sr": true, "sr16": true}"#;
    assert!((saved(x, &quant_rev(17)) - n * 0.0002e-9).abs() < 1e-15);
    let sr4 = r#"{"format": "nvfp4", "sr": true, "sr4": true}, {"format": "nvfp4", "sr": true, "sr4": true}"#;
    assert_eq!(saved(sr4, ""), 0.0);
    assert_eq!(
        saved(r#"{"format": "nvfp4"}, {"format": "nvfp4"}"#, ""),
        0.0
    );
    // The file's fitted value: a saving, smaller than an element's whole price.
    let e = hw("h200").emulation.unwrap();
    assert!(e.sr16_int_saving_s_per_elem > 0.0 && e.sr16_int_saving_s_per_elem < e.s_per_elem);
}

#[test]
fn emulated_quantizer_only_where_fp4_is_missing() {
    let op = parse_op(&triton_quant(1e6, 0, Some("fourcast-triton"))).unwrap();
    let err = op_time(&hw("b200"), &op).unwrap_err().to_string();
    assert!(err.contains("FP4"), "{err}");
    // A GPU without fitted emulation costs says so rather than guessing.
    let err = op_time(&hw("mi300x"), &op).unwrap_err().to_string();
    assert!(err.contains("emulation"), "{err}");
    let bad = parse_op(&triton_quant(1e6, 0, Some("cuda-magic"))).unwrap();
    assert!(op_time(&hw("h200"), &bad).is_err());
    // Untagged ops keep the vendor-grade price on every GPU.
    let plain = parse_op(&triton_quant(1e6, 0, None)).unwrap();
    let vendor = op_time(&hw("b200"), &plain).unwrap();
    assert!(!vendor.detail.contains_key("emulation_s"));
}

fn attn(h: &Hw, batch: f64, seq: f64, head_dim: f64) -> (f64, f64) {
    let s = super::attention::AttnShape {
        batch,
        seq,
        heads: 16.0,
        kv_heads: 16.0,
        head_dim,
        causal: true,
        fp8: false,
    };
    let (f, b, _) = super::attention::attention_time(h, &s).unwrap();
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

#[test]
fn emulated_quantizer_prices_rotation_by_kernel() {
    // A call without SR runs the strip kernel's plain tile (its own, cheaper rotation term); a
    // call with SR its SR tile (the other; an RHT of 16 its own again). (Revision 9, one tile a
    // strip program: an RHT would change the tiles a program takes; the amax given, so that
    // no amax pass rotates.)
    let h = hw("h200");
    let e = h.emulation.unwrap();
    assert!(
        e.strip_rht_s_per_elem < e.rht_s_per_elem,
        "h200.toml fits both"
    );
    let cost = |rht: u32, sr: bool| {
        let op = format!(
            r#"{{"op": "quantize", "numel": 1e7, "impl": "fourcast-triton", "quant_rev": 9, "refresh": 10, "outputs": [{{"format": "nvfp4", "sr": {sr}}}, {{"format": "nvfp4", "rht": {rht}, "sr": {sr}}}]}}"#
        );
        op_time(&h, &parse_op(&op).unwrap()).unwrap().detail["emulation_s"]
    };
    let strip = cost(16, false) - cost(0, false);
    let sr16 = cost(16, true) - cost(0, true);
    let sr32 = cost(32, true) - cost(0, true);
    assert!(
        (strip - 1e7 * e.strip_rht_s_per_elem).abs() <= 1e-12,
        "{strip}"
    );
    assert!(
        (sr16 - 1e7 * e.rht16_sr_s_per_elem).abs() <= 1e-12,
        "{sr16}"
    );
    assert!((sr32 - 1e7 * e.rht_s_per_elem).abs() <= 1e-12, "{sr32}");
}

/// The emulated price of a 32768 x 2304 row+col quantize call (fourcast-triton, amaxes
/// given) with these outputs and extra op fields.
fn emulated_quant_price(hw: &Hw, outs: &str, extra: &str) -> f64 {
    let op = format!(
        r#"{{"op": "quantize", "numel": 75497472, "impl": "fourcast-triton", "refresh": 10, "outputs": [{outs}]{extra}}}"#
    );
    op_time(hw, &parse_op(&op).unwrap()).unwrap().detail["emulation_s"]
}

#[test]
fn emulated_gluon_route_prices_rtne_row_col_calls_as_a_fraction_of_the_strip_price() {
    // Quantizer revision 13 (session 17): RTNE row+col calls without an RHT on 4-bit formats
    // with 1-D blocks run kernels/rowcol_gluon.py, priced `call_s + factor * (strip price -
    // call_s)`. SR, an RHT, one copy, 2-D tiles, 8-bit copies, fake-quant containers and
    // revision 12 keep the strip kernel's price.
    let term = "emulation.triton_quant_gluon_time_factor";
    let half = h200_with(term, "0.5");
    let e = half.emulation.unwrap();
    assert_eq!(e.gluon_time_factor, 0.5);
    let price = |hw: &Hw, outs: &str, extra: &str| {
        emulated_quant_price(hw, outs, &format!(r#"{extra}, "quant_rev": 13"#))
    };
    let rev12 = &quant_rev(12);
    for outs in [
        r#"{"format": "nvfp4"}, {"format": "nvfp4"}"#,
        r#"{"format": "ue5m3", "decoded": true}, {"format": "ue5m3"}"#,
        r#"{"format": "mxfp4"}, {"format": "mxfp4", "decoded": true}"#,
        r#"{"format": "int4"}, {"format": "int4"}"#,
    ] {
        let strip = emulated_quant_price(&half, outs, rev12);
        assert!(
            (price(&half, outs, "") - (e.call_s + 0.5 * (strip - e.call_s))).abs() < 1e-15,
            "{outs}"
        );
    }
    let nv2d =
        r#"{"element": "e2m1", "scale": "e4m3", "block": 16, "rule": "te", "tile_2d": true}"#;
    for outs in [
        r#"{"format": "nvfp4", "sr": true, "sr16": true}, {"format": "nvfp4", "sr": true, "sr16": true}"#,
        r#"{"format": "nvfp4"}, {"format": "nvfp4", "rht": 16}"#,
        r#"{"format": "nvfp4"}"#,
        r#"{"format": "mxfp8"}, {"format": "mxfp8"}"#,
        r#"{"format": "nvfp4", "container": "bf16"}, {"format": "nvfp4", "container": "bf16"}"#,
        &format!(r#"{{"format": {nv2d}}}, {{"format": {nv2d}}}"#),
    ] {
        assert_eq!(
            price(&half, outs, ""),
            emulated_quant_price(&half, outs, rev12),
            "{outs}"
        );
    }
}

#[test]
fn emulated_gluon_route_scales_the_kernel_not_the_amax_pass() {
    // A call that measures its tensor amax (refresh 1, a two-level format) runs an amax pass
    // before either quantizer (strip.py's up to revision 14): the Gluon factor applies to the
    // rest of the price only.
    let hw = h200_with("emulation.triton_quant_gluon_one_lane_time_factor", "0.5");
    let e = hw.emulation.unwrap();
    let price = |outs: &str, extra: &str| {
        let op = format!(
            r#"{{"op": "quantize", "numel": 75497472, "impl": "fourcast-triton", "refresh": 1, "outputs": [{outs}]{extra}}}"#
        );
        op_time(&hw, &parse_op(&op).unwrap()).unwrap().detail["emulation_s"]
    };
    let outs = r#"{"format": "nvfp4", "decoded": true}, {"format": "nvfp4"}"#;
    let strip = price(outs, &quant_rev(12));
    let amax_pass = 75497472.0 * e.amax_s_per_elem;
    assert!(amax_pass > 0.0);
    let want = e.call_s + amax_pass + 0.5 * (strip - e.call_s - amax_pass);
    let rev14 = price(outs, &quant_rev(14)); // revision 15 prices its own amax pass
    assert!((rev14 - want).abs() < 1e-15, "{rev14} {want}");
}

#[test]
fn emulated_gluon_amax_pass_is_priced_per_element_from_revision_15() {
    // Revision 15 (session 18): a row+col call that measures its tensor amax
    // runs rowcol_gluon.py's amax pass where it applies (no row RHT; a column RHT of 16 or
    // none), at gluon_amax(_rht)_time_factor of the fitted amax term's price, on either
    // quantizer route. Revision 14 and a row RHT keep the fitted price.
    let hw = hw("h200");
    let e = hw.emulation.unwrap();
    assert!(
        e.gluon_amax_rht_time_factor < e.gluon_amax_time_factor && e.gluon_amax_time_factor < 1.0
    );
    let n = 75497472.0;
    let price = |outs: &str, extra: &str| {
        let op = format!(
            r#"{{"op": "quantize", "numel": {n}, "impl": "fourcast-triton", "refresh": 1, "outputs": [{outs}]{extra}}}"#
        );
        op_time(&hw, &parse_op(&op).unwrap()).unwrap().detail["emulation_s"]
    };
    let (rev14, rev15) = (&quant_rev(14), &quant_rev(15));
    let sr16 = r#""sr": true, "sr16": true"#;
    for (outs, factor) in [
        // TE's X call (Gluon route) and dY call (decoded column: strip route)
        (
            r#"{"format": "nvfp4", "decoded": true}, {"format": "nvfp4", "rht": 16}"#.to_string(),
            e.gluon_amax_rht_time_factor,
        ),
        (
            format!(
                r#"{{"format": "nvfp4", "decoded": true, {sr16}}}, {{"format": "nvfp4", "decoded": true, "rht": 16, {sr16}}}"#
            ),
            e.gluon_amax_rht_time_factor,
        ),
        (
            r#"{"format": "nvfp4"}, {"format": "nvfp4"}"#.to_string(),
            e.gluon_amax_time_factor,
        ),
    ] {
        // a rotated call's pass carries the rotated amax term too (0 where the file has none)
        let rotated = if outs.contains("rht") {
            e.amax_rht_s_per_elem
        } else {
            0.0
        };
        let saved = price(&outs, rev14) - price(&outs, rev15);
        assert!(
            (saved - n * (e.amax_s_per_elem + rotated) * (1.0 - factor)).abs() < 1e-12,
            "{outs}: {saved}"
        );
    }
    let row_rht = r#"{"format": "nvfp4", "rht": 16}, {"format": "nvfp4"}"#;
    assert_eq!(price(row_rht, rev14), price(row_rht, rev15));
}

/// Input elements of the 32768 x 2304 calls the emulation tests price.
const EMUL_NUMEL: f64 = 75497472.0;

/// The h200 file's machine with one emulation term (`set` writes it) at 0 and at `value`.
fn h200_term_off_and_on(value: f64, set: impl Fn(&mut EmulCost, f64)) -> (Hw, Hw) {
    let at = |v: f64| {
        let mut h = hw("h200");
        let mut e = h.emulation.unwrap();
        set(&mut e, v);
        h.emulation = Some(e);
        h
    };
    (at(0.0), at(value))
}

/// What `with` adds to `without`'s emulation price of a 32768 x 2304 quantize call
/// (fourcast-triton) with these outputs, refresh and quantizer revision.
fn emulation_extra(with: &Hw, without: &Hw, outs: &str, refresh: u32, rev: u32) -> f64 {
    let op = format!(
        r#"{{"op": "quantize", "numel": {EMUL_NUMEL}, "impl": "fourcast-triton", "refresh": {refresh}, "quant_rev": {rev}, "outputs": [{outs}]}}"#
    );
    let op = parse_op(&op).unwrap();
    op_time(with, &op).unwrap().detail["emulation_s"]
        - op_time(without, &op).unwrap().detail["emulation_s"]
}

#[test]
fn emulated_amax_pass_of_a_rotated_call_adds_the_rotated_amax_term() {
    // A call with an RHT on any copy measures the rotated copy's amax: its amax pass costs
    // amax_rht_s_per_elem more per input element (strip.py's rotated pass 2.5-2.9x its plain
    // one, kernels-h200.md session 18 item 5), at every revision. From revision 15
    // rowcol_gluon's rotated pass (a column RHT of 16) scales it with the rest of the pass.
    // An unrotated call, an amax given and a format without a tensor scale add nothing.
    let (zero, with) = h200_term_off_and_on(2e-12, |e, v| e.amax_rht_s_per_elem = v);
    let e = with.emulation.unwrap();
    let n = EMUL_NUMEL;
    let extra =
        |outs: &str, refresh: u32, rev: u32| emulation_extra(&with, &zero, outs, refresh, rev);
    let te_x = r#"{"format": "nvfp4", "decoded": true}, {"format": "nvfp4", "rht": 16}"#;
    let sr16 = r#""sr": true, "sr16": true"#;
    let te_dy = format!(
        r#"{{"format": "nvfp4", "decoded": true, {sr16}}}, {{"format": "nvfp4", "decoded": true, "rht": 16, {sr16}}}"#
    );
    let full = n * e.amax_rht_s_per_elem;
    let gluon = full * e.gluon_amax_rht_time_factor;
    assert!(gluon > 0.0 && gluon < full);
    for (outs, rev, want) in [
        (te_x, 12, full), // strip.py's quantizer and amax pass
        (te_x, 14, full), // rowcol_gluon quantizes, strip.py's amax pass
        (te_x, 15, gluon),
        (te_x, QUANT_REV, gluon),
        (&te_dy, 14, full),
        (&te_dy, QUANT_REV, gluon),
        // a row RHT keeps strip.py's pass, as does a call of one copy
        (
            r#"{"format": "nvfp4", "rht": 16}, {"format": "nvfp4"}"#,
            QUANT_REV,
            full,
        ),
        (r#"{"format": "nvfp4", "rht": 16}"#, QUANT_REV, full),
        (r#"{"format": "nvfp4"}, {"format": "nvfp4"}"#, 12, 0.0),
        (
            r#"{"format": "nvfp4"}, {"format": "nvfp4"}"#,
            QUANT_REV,
            0.0,
        ),
        (
            r#"{"format": "mxfp4"}, {"format": "mxfp4", "rht": 32}"#,
            QUANT_REV,
            0.0,
        ),
    ] {
        let got = extra(outs, 1, rev);
        assert!(
            (got - want).abs() < 1e-15,
            "{outs} rev {rev}: {got} vs {want}"
        );
    }
    assert_eq!(extra(te_x, 10, QUANT_REV), 0.0); // the amax given: no pass
}

#[test]
fn emulated_sr_rotation_of_16_has_its_own_term() {
    // With SR a copy rotated by an RHT of 16 (TE's dY call, with "sr16", "sr4" or "sr")
    // prices its rotation with rht16_sr_s_per_elem, at every revision: strip.py's price,
    // rowcol_gluon's factor of it where the call runs there (a packed column copy from
    // revision 14, a decoded one from 16). Other rotations with SR (MXFP4's row RHT of 32)
    // keep rht_s_per_elem, calls without SR (TE's X call) strip_rht_s_per_elem. A file
    // without the term prices those copies with rht_s_per_elem, as before it.
    let (zero, with) = h200_term_off_and_on(2e-12, |e, v| e.rht16_sr_s_per_elem = v);
    let e = with.emulation.unwrap();
    let full = EMUL_NUMEL * e.rht16_sr_s_per_elem;
    let sr16 = r#""sr": true, "sr16": true"#;
    let te_dy = format!(
        r#"{{"format": "nvfp4", "decoded": true, {sr16}}}, {{"format": "nvfp4", "decoded": true, "rht": 16, {sr16}}}"#
    );
    let packed_dy =
        format!(r#"{{"format": "nvfp4", {sr16}}}, {{"format": "nvfp4", "rht": 16, {sr16}}}"#);
    let sr4_dy = r#"{"format": "nvfp4", "sr": true, "sr4": true}, {"format": "nvfp4", "rht": 16, "sr": true, "sr4": true}"#;
    let sr_dy = r#"{"format": "nvfp4", "sr": true}, {"format": "nvfp4", "rht": 16, "sr": true}"#;
    let te_x = r#"{"format": "nvfp4", "decoded": true}, {"format": "nvfp4", "rht": 16}"#;
    let mx_x = format!(r#"{{"format": "mxfp4", "rht": 32}}, {{"format": "mxfp4", {sr16}}}"#);
    for (outs, rev, want) in [
        (te_dy.as_str(), 12, full),
        (&te_dy, 15, full), // a decoded column copy: strip.py's quantizer up to 15
        (&te_dy, QUANT_REV, full * e.gluon_rht_decoded_time_factor),
        (&packed_dy, 12, full),
        (&packed_dy, 14, full * e.gluon_rht_time_factor),
        (sr4_dy, 9, full),
        (sr_dy, 9, full),
        (sr_dy, QUANT_REV, full),
        (te_x, 12, 0.0),
        (te_x, QUANT_REV, 0.0),
        (&mx_x, 12, 0.0),
        (&mx_x, QUANT_REV, 0.0),
    ] {
        for refresh in [1, 10] {
            let got = emulation_extra(&with, &zero, outs, refresh, rev);
            assert!(
                (got - want).abs() < 1e-15,
                "{outs} rev {rev}: {got} vs {want}"
            );
        }
    }
    let mut old = Profile::load("h200").unwrap();
    old.emulation
        .as_mut()
        .unwrap()
        .triton_quant_rht16_sr_ns_per_elem = None;
    let e = Hw::from_profile(&old).emulation.unwrap();
    assert_eq!(e.rht16_sr_s_per_elem, e.rht_s_per_elem);
}

#[test]
fn emulated_one_lane_gluon_route_prices_rtne_and_sr16_calls_by_their_own_factors() {
    // Quantizer revision 14 (session 18): rowcol_gluon.py with a block of 16 in
    // one lane; its RTNE calls cost `gluon_one_lane_time_factor` of the strip price beyond
    // call_s, and it takes the "sr16" calls with blocks of 16 (both copies), at
    // `gluon_sr16_time_factor`, and the calls whose packed column copy alone has an RHT of
    // 16, at `gluon_rht_time_factor`. "sr16" on blocks of 32, "sr" and "sr4", a row RHT, an
    // RHT on a decoded column copy or of 32, and one "sr16" copy beside an RTNE one keep the
    // strip price; revision 13 keeps its own factor.
    let hw = h200_with_all(&[
        ("emulation.triton_quant_gluon_one_lane_time_factor", "0.25"),
        ("emulation.triton_quant_gluon_sr16_time_factor", "0.75"),
        ("emulation.triton_quant_gluon_time_factor", "0.5"),
        ("emulation.triton_quant_gluon_rht_time_factor", "0.625"),
    ]);
    let (rev12, rev13, rev14) = (&quant_rev(12), &quant_rev(13), &quant_rev(14));
    let scaled = |outs: &str, factor: f64| gluon_scaled(&hw, outs, factor);
    let close = |a: f64, b: f64| (a - b).abs() < 1e-15;
    for outs in [
        r#"{"format": "nvfp4"}, {"format": "nvfp4"}"#,
        r#"{"format": "ue5m3", "decoded": true}, {"format": "ue5m3"}"#,
        r#"{"format": "mxfp4"}, {"format": "mxfp4"}"#,
    ] {
        assert!(
            close(emulated_quant_price(&hw, outs, rev14), scaled(outs, 0.25)),
            "{outs}"
        );
        assert!(
            close(emulated_quant_price(&hw, outs, rev13), scaled(outs, 0.5)),
            "{outs}"
        );
    }
    // revision 14's own calls: its factor at 14, the strip price at 13
    let sr16 = r#""sr": true, "sr16": true"#;
    for (outs, factor) in [
        (
            format!(
                r#"{{"format": "ue5m3", "decoded": true, {sr16}}}, {{"format": "ue5m3", "decoded": true, {sr16}}}"#
            ),
            0.75,
        ),
        (
            format!(r#"{{"format": "nvfp4", {sr16}}}, {{"format": "nvfp4", {sr16}}}"#),
            0.75,
        ),
        (
            format!(r#"{{"format": "nvfp4", {sr16}}}, {{"format": "nvfp4", "rht": 16, {sr16}}}"#),
            0.625,
        ),
        (
            r#"{"format": "nvfp4", "decoded": true}, {"format": "nvfp4", "rht": 16}"#.to_string(),
            0.625,
        ),
        (
            r#"{"format": "ue5m3"}, {"format": "ue5m3", "rht": 16}"#.to_string(),
            0.625,
        ),
    ] {
        assert!(
            close(
                emulated_quant_price(&hw, &outs, rev14),
                scaled(&outs, factor)
            ),
            "{outs}"
        );
        assert_eq!(
            emulated_quant_price(&hw, &outs, rev13),
            emulated_quant_price(&hw, &outs, rev12),
            "{outs}"
        );
    }
    for outs in [
        format!(r#"{{"format": "mxfp4", {sr16}}}, {{"format": "mxfp4", {sr16}}}"#),
        r#"{"format": "nvfp4", "sr": true}, {"format": "nvfp4", "sr": true}"#.to_string(),
        r#"{"format": "nvfp4", "rht": 16}, {"format": "nvfp4"}"#.to_string(),
        r#"{"format": "nvfp4"}, {"format": "nvfp4", "rht": 16, "decoded": true}"#.to_string(),
        r#"{"format": "mxfp4"}, {"format": "mxfp4", "rht": 32}"#.to_string(),
        format!(r#"{{"format": "nvfp4"}}, {{"format": "nvfp4", {sr16}}}"#),
    ] {
        assert_eq!(
            emulated_quant_price(&hw, &outs, rev14),
            emulated_quant_price(&hw, &outs, rev12),
            "{outs}"
        );
    }
}

#[test]
fn emulated_te_calls_price_by_their_own_factors_from_revision_16() {
    // Quantizer revision 16 (session 19, the default): rowcol_gluon.py takes TE's dY call (a
    // column RHT of 16 on a decoded column copy, "sr16") at `gluon_rht_decoded_time_factor`
    // and runs the RTNE calls with a column RHT of 16 (TE's X call) at two row tiles a
    // program, at `gluon_rht_rtne_time_factor`; "sr16" calls with a packed rotated column
    // keep `gluon_rht_time_factor`. At revision 15 the decoded rotated column is the strip
    // kernel's and the RTNE calls take `gluon_rht_time_factor`.
    let hw = h200_with_all(&[
        ("emulation.triton_quant_gluon_rht_time_factor", "0.625"),
        ("emulation.triton_quant_gluon_rht_rtne_time_factor", "0.5"),
        (
            "emulation.triton_quant_gluon_rht_decoded_time_factor",
            "0.75",
        ),
    ]);
    let (rev12, rev15, rev16) = (&quant_rev(12), &quant_rev(15), &quant_rev(16));
    let scaled = |outs: &str, factor: f64| gluon_scaled(&hw, outs, factor);
    let close = |a: f64, b: f64| (a - b).abs() < 1e-15;
    let sr16 = r#""sr": true, "sr16": true"#;
    let te_dy = format!(
        r#"{{"format": "nvfp4", "decoded": true, {sr16}}}, {{"format": "nvfp4", "rht": 16, "decoded": true, {sr16}}}"#
    );
    let te_x =
        r#"{"format": "nvfp4", "decoded": true}, {"format": "nvfp4", "rht": 16}"#.to_string();
    let codes_sr16 =
        format!(r#"{{"format": "nvfp4", {sr16}}}, {{"format": "nvfp4", "rht": 16, {sr16}}}"#);
    for (outs, at16, at15) in [
        (&te_dy, 0.75, None),
        (&te_x, 0.5, Some(0.625)),
        (&codes_sr16, 0.625, Some(0.625)),
    ] {
        assert!(
            close(emulated_quant_price(&hw, outs, ""), scaled(outs, at16)),
            "{outs}"
        );
        assert!(
            close(emulated_quant_price(&hw, outs, rev16), scaled(outs, at16)),
            "{outs}"
        );
        let want15 = at15.map_or(emulated_quant_price(&hw, outs, rev12), |f| scaled(outs, f));
        assert!(
            close(emulated_quant_price(&hw, outs, rev15), want15),
            "{outs}"
        );
    }
    // a row RHT, a column RHT of 32 and "sr" keep the strip price at 16
    for outs in [
        r#"{"format": "nvfp4", "rht": 16}, {"format": "nvfp4", "decoded": true}"#,
        r#"{"format": "mxfp4"}, {"format": "mxfp4", "rht": 32, "decoded": true}"#,
        r#"{"format": "nvfp4", "sr": true}, {"format": "nvfp4", "rht": 16, "decoded": true, "sr": true}"#,
    ] {
        assert_eq!(
            emulated_quant_price(&hw, outs, rev16),
            emulated_quant_price(&hw, outs, rev12),
            "{outs}"
        );
    }
}

#[test]
fn emulated_gathered_column_stores_save_per_input_element_of_a_packed_column_copy() {
    // Quantizer revision 12 (session 12, training-h200 run 18 on; the default): strip
    // programs of several row tiles store a packed 4-bit column copy's code and scale bytes
    // once. The X call (row copy decoded, column copy packed) saves the term per input
    // element; a call whose column copy is decoded (dY), a one-tile call (an RHT), an 8-bit
    // copy and revisions before 12 save nothing.
    let term = "emulation.triton_quant_gather_saving_ns_per_elem";
    assert!(
        (h200_with(term, "0.0003")
            .emulation
            .unwrap()
            .gather_saving_s_per_elem
            - 0.0003e-9)
            .abs()
            < 1e-20
    );
    let saved = |outs: &str, extra: &str| emulation_saving(term, "0.0003", outs, extra);
    let n = 75497472.0; // 32768 x 2304, an X call of the 125M model
    let x = r#"{"format": "ue5m3", "decoded": true}, {"format": "ue5m3"}"#;
    let rev12 = &quant_rev(12);
    assert!((saved(x, rev12) - n * 0.0003e-9).abs() < 1e-15);
    assert_eq!(saved(x, &quant_rev(11)), 0.0);
    // Revision 14 runs this RTNE call on the Gluon kernel: the strip price scaled, saving too.
    let factor = Hw::from_profile(&Profile::load("h200").unwrap())
        .emulation
        .unwrap()
        .gluon_one_lane_time_factor;
    assert!((saved(x, "") - factor * saved(x, rev12)).abs() < 1e-15);
    let dy = r#"{"format": "ue5m3", "decoded": true}, {"format": "ue5m3", "decoded": true}"#;
    assert_eq!(saved(dy, ""), 0.0);
    let rotated = r#"{"format": "nvfp4"}, {"format": "nvfp4", "rht": 16}"#;
    assert_eq!(saved(rotated, ""), 0.0);
    assert_eq!(
        saved(r#"{"format": "mxfp8"}, {"format": "mxfp8"}"#, ""),
        0.0
    );
    assert_eq!(saved(r#"{"format": "ue5m3"}"#, ""), 0.0); // one copy: no strip kernel
}

#[test]
fn emulated_f32_inputs_run_the_gluon_kernels_from_revision_17() {
    // An f32 input (src_bytes 4: a LayerNorm's output under autocast) kept strip.py's kernels
    // up to revision 16 (rowcol_gluon.py read bf16 only); from 17 it runs rowcol_gluon.py at
    // `gluon_f32_time_factor` and its amax pass at the bf16 passes' factors.
    let hw = h200_with_all(&[
        ("emulation.triton_quant_gluon_f32_time_factor", "0.5"),
        ("emulation.triton_quant_gluon_rht_rtne_time_factor", "0.25"),
    ]);
    let price = |src: f64, rev: u32, refresh: u32| {
        let op = format!(
            r#"{{"op": "quantize", "numel": 25165824, "impl": "fourcast-triton", "refresh": {refresh}, "src_bytes": {src}, "quant_rev": {rev}, "outputs": [{{"format": "nvfp4", "decoded": true}}, {{"format": "nvfp4", "rht": 16}}]}}"#
        );
        op_time(&hw, &parse_op(&op).unwrap()).unwrap().detail["emulation_s"]
    };
    let e = hw.emulation.unwrap();
    for refresh in [1, 10] {
        assert_eq!(price(4.0, 16, refresh), price(4.0, 12, refresh));
        assert!(price(4.0, 16, refresh) > price(2.0, 16, refresh));
        assert_eq!(price(2.0, 17, refresh), price(2.0, 16, refresh));
        // the same call cost and amax pass (strip's: what refresh 1 adds to the strip price);
        // the kernel beyond them at 0.5 against the bf16 call's 0.25
        let strip = price(2.0, 12, refresh);
        let pass = strip - price(2.0, 12, 10);
        let kernel = strip - e.call_s - pass;
        let gap = price(4.0, 17, refresh) - price(2.0, 17, refresh);
        assert!(
            (gap - 0.25 * kernel).abs() < 1e-12,
            "{refresh}: {gap} {kernel}"
        );
    }
}

#[test]
fn emulated_mxfp4_calls_run_the_gluon_kernel_from_revision_18() {
    // Revision 18 (session 19, the default): rowcol_gluon.py holds a block of 32 in one lane,
    // so MXFP4's X and W calls (a row RHT of 32, RTNE, beside an "sr16" column copy) run it at
    // `gluon_row_rht_time_factor` and its dY call ("sr16" on both) at
    // `gluon_block32_sr16_time_factor`; up to 17 they kept the strip price. A column RHT of 32,
    // a row RHT beside a column one and "sr" keep it at 18 too.
    let hw = h200_with_all(&[
        ("emulation.triton_quant_gluon_row_rht_time_factor", "0.5"),
        (
            "emulation.triton_quant_gluon_block32_sr16_time_factor",
            "0.75",
        ),
    ]);
    let (rev12, rev17) = (&quant_rev(12), &quant_rev(17));
    let close = |a: f64, b: f64| (a - b).abs() < 1e-15;
    let sr16 = r#""sr": true, "sr16": true"#;
    for (outs, factor) in [
        (
            format!(
                r#"{{"format": "mxfp4", "rht": 32, "decoded": true}}, {{"format": "mxfp4", {sr16}}}"#
            ),
            0.5,
        ),
        (
            format!(
                r#"{{"format": "mxfp4", "rht": 32, "decoded": true}}, {{"format": "mxfp4", "decoded": true, {sr16}}}"#
            ),
            0.5,
        ),
        (
            format!(
                r#"{{"format": "mxfp4", "decoded": true, {sr16}}}, {{"format": "mxfp4", "decoded": true, {sr16}}}"#
            ),
            0.75,
        ),
    ] {
        let at18 = emulated_quant_price(&hw, &outs, "");
        assert!(close(at18, gluon_scaled(&hw, &outs, factor)), "{outs}");
        assert_eq!(
            emulated_quant_price(&hw, &outs, rev17),
            emulated_quant_price(&hw, &outs, rev12),
            "{outs}"
        );
    }
    for outs in [
        r#"{"format": "mxfp4"}, {"format": "mxfp4", "rht": 32}"#,
        r#"{"format": "mxfp4", "rht": 32}, {"format": "mxfp4", "rht": 32}"#,
        r#"{"format": "mxfp4", "sr": true}, {"format": "mxfp4", "sr": true}"#,
    ] {
        assert_eq!(
            emulated_quant_price(&hw, outs, ""),
            emulated_quant_price(&hw, outs, rev12),
            "{outs}"
        );
    }
}
