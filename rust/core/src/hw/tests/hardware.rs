//! Hardware files load, or fail naming the file and line; overrides and native
//! features validate.

use super::*;

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
