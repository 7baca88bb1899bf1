//! The H200's emulation cost (`[emulation]`): how fourcast's Triton quantizers and the
//! emulated GEMMs are priced, revision by revision, term by term.

use super::*;

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

#[test]
fn emulated_column_rht_amax_pass_in_f32_from_revision_20() {
    // Revision 20 (session 25): a bf16 input's amax pass with a column RHT of 16 runs the RHT
    // in f32 where exact, at gluon_amax_rht_split_time_factor of strip.py's pass instead of
    // revision 19's gluon_amax_rht_time_factor; an f32 input's rotated pass (still f64) and
    // an unrotated pass are priced as before.
    let hw = hw("h200");
    let e = hw.emulation.unwrap();
    assert!(e.gluon_amax_rht_split_time_factor < e.gluon_amax_rht_time_factor);
    let n = EMUL_NUMEL;
    let price = |outs: &str, src: u32, rev: u32| {
        let op = format!(
            r#"{{"op": "quantize", "numel": {n}, "impl": "fourcast-triton", "refresh": 1, "src_bytes": {src}, "quant_rev": {rev}, "outputs": [{outs}]}}"#
        );
        op_time(&hw, &parse_op(&op).unwrap()).unwrap().detail["emulation_s"]
    };
    let te_x = r#"{"format": "nvfp4", "decoded": true}, {"format": "nvfp4", "rht": 16}"#;
    let pass = n * (e.amax_s_per_elem + e.amax_rht_s_per_elem);
    let saved = price(te_x, 2, 19) - price(te_x, 2, 20);
    let want = pass * (e.gluon_amax_rht_time_factor - e.gluon_amax_rht_split_time_factor);
    assert!(
        saved > 0.0 && (saved - want).abs() < 1e-12,
        "{saved} {want}"
    );
    assert_eq!(price(te_x, 4, 19), price(te_x, 4, 20));
    let plain = r#"{"format": "nvfp4"}, {"format": "nvfp4"}"#;
    assert_eq!(price(plain, 2, 19), price(plain, 2, 20));
}

#[test]
fn emulated_packed_column_rht_calls_on_one_tile_at_80_registers_from_revision_21() {
    // Revision 21 (session 26): a bf16 input's calls with both copies packed and a column RHT
    // of 16 run one row tile at 80 registers: the call's price (the amax given) times
    // gluon_rht_packed_rtne_time_factor (RTNE) or _sr16_ (TE's dY codes) against 20's;
    // a decoded copy, an f32 input or a call without the RHT as before.
    let hw = hw("h200");
    let e = hw.emulation.unwrap();
    assert!(e.gluon_rht_packed_rtne_time_factor < 1.0 && e.gluon_rht_packed_sr16_time_factor < 1.0);
    let n = EMUL_NUMEL;
    let price = |outs: &str, src: u32, rev: u32| {
        let op = format!(
            r#"{{"op": "quantize", "numel": {n}, "impl": "fourcast-triton", "refresh": 10, "src_bytes": {src}, "quant_rev": {rev}, "outputs": [{outs}]}}"#
        );
        op_time(&hw, &parse_op(&op).unwrap()).unwrap().detail["emulation_s"]
    };
    let codes = r#"{"format": "nvfp4"}, {"format": "nvfp4", "rht": 16}"#;
    let dy = r#"{"format": "nvfp4", "sr": true, "sr16": true}, {"format": "nvfp4", "rht": 16, "sr": true, "sr16": true}"#;
    for (outs, factor) in [
        (codes, e.gluon_rht_packed_rtne_time_factor),
        (dy, e.gluon_rht_packed_sr16_time_factor),
    ] {
        // the factor scales the quantizing kernel's price, not the whole call's
        let (old, new) = (price(outs, 2, 20), price(outs, 2, 21));
        assert!(
            new < old && new > old * factor,
            "{outs}: {old} {new} {factor}"
        );
    }
    let te_x = r#"{"format": "nvfp4", "decoded": true}, {"format": "nvfp4", "rht": 16}"#;
    assert_eq!(price(te_x, 2, 20), price(te_x, 2, 21));
    assert_eq!(price(codes, 4, 20), price(codes, 4, 21));
    let plain = r#"{"format": "nvfp4"}, {"format": "nvfp4"}"#;
    assert_eq!(price(plain, 2, 20), price(plain, 2, 21));
    // Revision 22 (session 28: scale bytes kept in L2, 128 x 128 tiles) is priced as 21 until
    // a training run records it
    for outs in [codes, dy, te_x, plain] {
        assert_eq!(price(outs, 2, 21), price(outs, 2, 22), "{outs}");
    }
    // and revision 23 (session 29: UFP4's calls on rowcol_gluon, the RHT's norm in f32) too
    let ufp4 = r#"{"format": "ufp4", "decoded": true, "rht": 16}, {"format": "ufp4", "rht": 16}"#;
    for outs in [codes, dy, te_x, plain, ufp4] {
        assert_eq!(price(outs, 2, 21), price(outs, 2, 23), "{outs}");
    }
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
    let split = full * e.gluon_amax_rht_split_time_factor; // revision 20: f32 where exact
    assert!(gluon > 0.0 && gluon < full && split < gluon);
    for (outs, rev, want) in [
        (te_x, 12, full), // strip.py's quantizer and amax pass
        (te_x, 14, full), // rowcol_gluon quantizes, strip.py's amax pass
        (te_x, 15, gluon),
        (te_x, 19, gluon),
        (te_x, QUANT_REV, split),
        (&te_dy, 14, full),
        (&te_dy, 19, gluon),
        (&te_dy, QUANT_REV, split),
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
    // (from revision 21, the default, a bf16 input's packed "sr16" call runs at 80 registers)
    let packed = hw.emulation.unwrap().gluon_rht_packed_sr16_time_factor;
    for (outs, at16, at15, now) in [
        (&te_dy, 0.75, None, 1.0),
        (&te_x, 0.5, Some(0.625), 1.0),
        (&codes_sr16, 0.625, Some(0.625), packed),
    ] {
        assert!(
            close(
                emulated_quant_price(&hw, outs, ""),
                scaled(outs, at16 * now)
            ),
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
    // `gluon_f32_time_factor` and its amax pass at the bf16 passes' factors (here: the f32
    // amax factors at 1, which the next test prices).
    let hw = h200_with_all(&[
        ("emulation.triton_quant_gluon_f32_time_factor", "0.5"),
        ("emulation.triton_quant_gluon_rht_rtne_time_factor", "0.25"),
        ("emulation.triton_quant_amax_f32_time_factor", "1.0"),
        ("emulation.triton_quant_amax_rht_f32_time_factor", "1.0"),
        ("emulation.triton_quant_gluon_amax_f32_time_factor", "1.0"),
        (
            "emulation.triton_quant_gluon_amax_rht_f32_time_factor",
            "1.0",
        ),
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
fn emulated_f32_amax_pass_is_priced_at_its_factor_per_kernel_and_rotation() {
    // An f32 input's amax pass reads twice the bytes: its price is the bf16 pass's times the
    // factor of the kernel that runs it (strip.py's before revision 17, rowcol_gluon.py's from
    // 17) and of its rotation; the quantizing kernel after it, and every bf16 call, are unchanged.
    let hw = h200_with_all(&[
        ("emulation.triton_quant_amax_f32_time_factor", "1.5"),
        ("emulation.triton_quant_amax_rht_f32_time_factor", "1.25"),
        ("emulation.triton_quant_gluon_amax_f32_time_factor", "1.75"),
        (
            "emulation.triton_quant_gluon_amax_rht_f32_time_factor",
            "1.125",
        ),
    ]);
    let ones = h200_with_all(&[
        ("emulation.triton_quant_amax_f32_time_factor", "1.0"),
        ("emulation.triton_quant_amax_rht_f32_time_factor", "1.0"),
        ("emulation.triton_quant_gluon_amax_f32_time_factor", "1.0"),
        (
            "emulation.triton_quant_gluon_amax_rht_f32_time_factor",
            "1.0",
        ),
    ]);
    let price = |hw: &Hw, src: f64, rev: u32, refresh: u32, col: &str| {
        let op = format!(
            r#"{{"op": "quantize", "numel": 25165824, "impl": "fourcast-triton", "refresh": {refresh}, "src_bytes": {src}, "quant_rev": {rev}, "outputs": [{{"format": "nvfp4", "decoded": true}}, {{"format": "nvfp4"{col}}}]}}"#
        );
        op_time(hw, &parse_op(&op).unwrap()).unwrap().detail["emulation_s"]
    };
    for (rev, col, factor) in [
        (16, "", 1.5),
        (16, r#", "rht": 16"#, 1.25),
        (17, "", 1.75),
        (17, r#", "rht": 16"#, 1.125),
    ] {
        // the pass: what a measured amax (refresh 1) adds to a given one (refresh 10)
        let pass = |hw: &Hw, src: f64| price(hw, src, rev, 1, col) - price(hw, src, rev, 10, col);
        let (f32_pass, plain) = (pass(&hw, 4.0), pass(&ones, 4.0));
        assert!(plain > 0.0);
        assert!(
            (f32_pass - factor * plain).abs() < 1e-12,
            "{rev} {col}: {f32_pass} {plain}"
        );
        assert_eq!(
            price(&hw, 4.0, rev, 10, col),
            price(&ones, 4.0, rev, 10, col)
        );
        assert_eq!(price(&hw, 2.0, rev, 1, col), price(&ones, 2.0, rev, 1, col));
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
