"""The Gluon packed GEMM (kernels/gemm_wgmma.py) without a GPU: it compiles for sm_90a with
this Triton (Gluon's API moves between releases; the device runs Triton 3.6), its MMAs are
asynchronous wgmma with one step left in flight, nothing spills, and gemm routes to it only
where it applies. Its results are checked on the GPU (tests/gpu/test_kernels_gpu.py).

The compiles run in a child process with a fresh Triton cache (testing.compiled_in_child): in
this one the CPU tiers have run kernels under TRITON_INTERPRET=1, whose patches of
triton.language break a later real compile, and a warm cache would hide that (it hands back
the binary without compiling)."""

import json
import types

import pytest
import torch

from fourcast.kernels import gemm as gk
from fourcast.kernels import reference as ref
from fourcast.kernels import testing
from fourcast.kernels.utils import parse_fmt

gemm_wgmma = pytest.importorskip("fourcast.kernels.gemm_wgmma", reason="this Triton has no Gluon")
F = testing.FORMATS

_CHILD = r"""
import json, re, sys
from fourcast.kernels import gemm as gk, gemm_wgmma as gw, testing
from fourcast.kernels.utils import parse_fmt

fa, fb, cfg, parts = json.loads(sys.argv[1])
a, b = parse_fmt(testing.FORMATS[fa]), parse_fmt(testing.FORMATS[fb])
plan = gk.split_plan(a, b)
if parts == "ws":
    k = gw.compile_ws_sm90(a, b, plan, tuple(cfg))
elif parts in ("rs", "rs2", "rs2p"):  # rs2: code words two steps ahead (launch_packed's NVFP4/UFP4 route)
    k = gw.compile_rs_sm90(a, b, plan, tuple(cfg), ahead=1 if parts == "rs" else 2, persistent=parts == "rs2p")
else:
    k = gw.compile_sm90(a, b, plan, tuple(cfg), parts=parts)
ptx = k.asm["ptx"]
sass = testing.cuda_tool(k, "nvdisasm", "-c").splitlines()


def mma_loop_ops():
    # opcodes of the innermost loop that issues HGMMA (a label, then a backward branch to it)
    labels, ops, best = {}, [], None
    for line in sass:
        m = re.match(r"^(\.L_x_\d+):", line)
        if m:
            labels[m.group(1)] = len(ops)
            continue
        m = re.match(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if not m:
            continue
        ops.append(m.group(1))
        b = re.search(r"BRA `\((\.L_x_\d+)\)", line)
        if b and b.group(1) in labels:
            span = ops[labels[b.group(1)]:]
            if any(o.startswith("HGMMA") for o in span) and (best is None or len(span) < len(best)):
                best = span
    return best or []


hgmma = [ln for ln in sass if "HGMMA" in ln]
print(json.dumps(dict(
    wgmma="wgmma.mma_async" in ptx, waits=re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx),
    st_shared="st.shared" in ptx, prmt="prmt" in ptx, shared=k.metadata.shared,
    local=testing.spilled_bytes(k),
    hgmma=len(hgmma), hgmma_waiting=sum("gsb0" in ln for ln in hgmma),
    setmaxnreg=re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx),
    mbarrier_waits=len(re.findall(r"mbarrier\.try_wait", ptx)),
    wgmma_register_a=len(re.findall(r"wgmma\.mma_async[^;]*\},\s*\{%r\d+(?:,%r\d+){3}\}", ptx)),
    ptx_wgmma=len(re.findall(r"wgmma\.mma_async", ptx)),
    mma_loop={op: sum(o.split(".")[0] == op for o in mma_loop_ops()) for op in ("LDG", "STS", "LDS", "HGMMA")},
    prmt_sass=sum(" PRMT " in ln for ln in sass))))
"""


def _compiled(pair, cfg, parts=3) -> dict:
    return testing.compiled_in_child(_CHILD, json.dumps([*pair, list(cfg), parts]))


@pytest.mark.parametrize("pair,cfg", [(("nvfp4", "nvfp4-2d"), (128, 128, 128, 8, 8, 3)),
                                      (("mxfp4", "mxfp4"), (128, 128, 64, 8, 8, 3)),
                                      (("ue5m3", "ue5m3"), (128, 128, 128, 8, 8, 3))])
def test_compiles_for_sm90_with_async_wgmma_and_no_spills(pair, cfg):
    k = _compiled(pair, cfg)
    assert k["wgmma"]
    # inside the loop: wait until only the step just issued (two wgmma groups) is in flight
    assert "2" in k["waits"]
    assert k["shared"] == 4 * cfg[5] * 128 * cfg[2] // 2 * 2  # lo + hi, A + B, 16-bit, per slot
    assert k["local"] == 0
    # ptxas chains the wgmmas of a group: only each group's last HGMMA waits on the scoreboard
    # (when it serialises them, as it did before the wait on the zeroed accumulator, all do)
    assert 0 < k["hgmma_waiting"] < k["hgmma"]


@pytest.mark.parametrize("pair,cfg", [(("nvfp4", "nvfp4-2d"), gemm_wgmma.WS_CONFIG),
                                      (("ue5m3", "ue5m3"), gemm_wgmma.WS_CONFIG_BK64)])
def test_warp_specialised_kernel_compiles_with_async_wgmma_and_no_spills(pair, cfg):
    """_ws_kernel: the ring in shared memory (plus one mbarrier pair a slot), the decode
    partitions' registers set to their budget and the MMA partition's raised above it, its
    wgmmas left in flight a step, nothing spilled, and both sides waiting on mbarriers. The
    code bytes arrive as 32-bit words, which the PTX routine takes as they are: loaded as
    bytes, the compiler unpacked each into its own register and packed them back (423
    PRMTs for NVFP4 at WS_CONFIG, behind the long-scoreboard stalls of kernels-h200.md
    session 11; 26 with words)."""
    k = _compiled(pair, cfg, "ws")
    assert k["wgmma"] and "2" in k["waits"]
    assert k["shared"] >= 4 * cfg[4] * 128 * cfg[2] // 2 * 2
    budgets = {tuple(x) for x in k["setmaxnreg"]}
    assert str(cfg[6]) in {n for _, n in budgets}, budgets  # the decoders' budget
    assert any(d == "inc" and int(n) > cfg[6] for d, n in budgets), budgets  # the MMA partition's, above it
    assert k["local"] == 0
    assert k["mbarrier_waits"] >= 2
    if pair[0] == "nvfp4":
        assert k["prmt_sass"] < 100, k["prmt_sass"]



def test_warp_specialised_kernel_takes_a_128_x_256_tile_on_two_warpgroups():
    """WS_WIDE_CONFIG: 8 MMA warps (ws_mma_warps) hold the 128 x 256 accumulator at 168
    registers beside two 2-warp decoders, n256 wgmmas left in flight a step, nothing spilled
    (at 16 warps the launch capped every warp at 128, below what an n256 wgmma needs)."""
    cfg = gemm_wgmma.WS_WIDE_CONFIG
    assert gemm_wgmma.ws_mma_warps(cfg) == 8 and gemm_wgmma.ws_mma_warps(gemm_wgmma.WS_CONFIG) == 4
    k = _compiled(("nvfp4", "nvfp4-2d"), cfg, "ws")
    assert k["wgmma"] and "2" in k["waits"]
    assert k["shared"] >= 2 * cfg[4] * (cfg[0] + cfg[1]) * cfg[2]  # lo + hi, A + B, 16-bit, per slot
    assert ["dec", str(cfg[6])] in k["setmaxnreg"] or ["inc", str(cfg[6])] in k["setmaxnreg"], k["setmaxnreg"]
    assert k["local"] == 0


@pytest.mark.parametrize("pair,variant", [(("nvfp4", "nvfp4-2d"), "rs"), (("ue5m3", "ue5m3"), "rs"),
                                          (("nvfp4", "nvfp4-2d"), "rs2"), (("ufp4", "ufp4"), "rs2"),
                                          (("ue5m3", "ue5m3-2d"), "rs2"), (("nvfp4", "nvfp4-2d"), "rs2p")])
def test_register_sourced_kernel_takes_a_from_registers(pair, variant):
    """_rs_kernel: every wgmma takes A from registers (four 32-bit registers a k16 slice)
    and the ring holds B alone (lo + hi, 16-bit, per slot, plus the mbarriers); nothing
    spills, and the wgmmas are asynchronous. Its MMA loop touches no shared memory (A's
    dot-operand conversion is a register renaming) and loads A's step in at most 8 loads
    a thread: two rows' 16-byte code runs and their scale bytes once a run (loaded once a
    word, the scales took 8 more loads and held the L1/TEX pipeline at 79%: kernels-h200.md
    session 13). rs2: the same with code words loaded two steps ahead (gemm's route for
    NVFP4/UFP4/UE5M3), still one step's loads an iteration; rs2p: that kernel persistent (a
    loop over tiles around the same step loop)."""
    cfg = gemm_wgmma.RS_CONFIG
    k = _compiled(pair, cfg, variant)
    assert k["wgmma"] and k["hgmma"] > 0
    assert k["wgmma_register_a"] > 0 and k["wgmma_register_a"] == k["ptx_wgmma"], k
    ring = 2 * cfg[4] * cfg[1] * cfg[2] // 2 * 2
    assert ring <= k["shared"] < ring + 1024
    assert k["local"] == 0 and 0 < k["hgmma_waiting"] < k["hgmma"]
    loop = k["mma_loop"]
    assert loop["HGMMA"] > 0 and loop["STS"] == 0 and loop["LDS"] == 0, loop
    assert 0 < loop["LDG"] <= 8, loop

def test_fewer_decode_registers_still_spill_nothing():
    """_rs_kernel with its decode partition at 72 registers (the MMA warps then get 184, where
    Triton 3.6's ptxas leaves part of A's next-step decode under the wgmmas: gemm_kernels.py's
    RS_REG_CFGS, timed against RS_CONFIG): B's decoders and the MMA warps spill nothing."""
    k = _compiled(("nvfp4", "nvfp4-2d"), (128, 128, 128, 8, 6, 8, 72, 128), "rs2p")
    assert k["local"] == 0 and k["wgmma_register_a"] == k["ptx_wgmma"] > 0


def test_the_timing_parts_leave_out_what_they_say():
    """PARTS 1 (decode side only) issues no wgmma; PARTS 2 (MMA side only) decodes nothing."""
    decode_only = _compiled(("nvfp4", "nvfp4"), (128, 128, 64, 8, 8, 3), parts=1)
    mma_only = _compiled(("nvfp4", "nvfp4"), (128, 128, 64, 8, 8, 3), parts=2)
    assert not decode_only["wgmma"] and decode_only["st_shared"]
    assert mma_only["wgmma"] and not mma_only["prmt"]  # no table decode


@pytest.mark.parametrize("kernel", ["ws", "wgmma"])
def test_gemm_off_hopper_takes_the_split_kernel(kernel, monkeypatch):
    """Asked for "ws" (the default) or "wgmma" where they cannot run (here: the interpreter or
    a CPU tensor), gemm runs the split kernel: the same result as asking for it."""
    assert gk.KERNEL == "ws"
    for name in ("launch", "launch_ws"):
        monkeypatch.setattr(gemm_wgmma, name, lambda *a, **k: pytest.fail("gemm_wgmma launched off Hopper"))
    a = ref.quantize(testing.make_input("random", (32, 128), torch.float32, "cpu", seed=1), F["nvfp4"])
    b = ref.quantize(testing.make_input("random", (16, 128), torch.float32, "cpu", seed=2), F["nvfp4"])
    assert not gk._wgmma_ok(a, b, 128)
    monkeypatch.setattr(gk, "CONFIG_OVERRIDE", {"kernel": kernel})
    if gk.interpreting():
        via_wgmma = gk.gemm(a, b, torch.float32, impl="triton")
        monkeypatch.setattr(gk, "CONFIG_OVERRIDE", {"kernel": "split"})
        assert torch.equal(via_wgmma, gk.gemm(a, b, torch.float32, impl="triton"))


@pytest.mark.parametrize("fmt,ok", [("nvfp4", True), ("mxfp4", True), ("ue5m3-2d", True), ("ufp4", True),
                                    ("ufp4-int4", False), ("mxfp8", False)])
def test_which_formats_it_takes(fmt, ok, monkeypatch):
    """LUT/CVT formats only (4-bit sign-magnitude grids, block scales): the rest stay on split."""
    monkeypatch.setattr(gk, "interpreting", lambda: False)
    monkeypatch.setattr(gk, "_capability", lambda index: (9, 0))
    spec = parse_fmt(F[fmt])
    p = type("P", (), {"spec": spec, "codes": type("T", (), {"is_cuda": True, "device": torch.device("cuda", 0)})()})()
    assert gk._wgmma_ok(p, p, 4096) is ok
    assert not gk._wgmma_ok(p, p, 4096 + 32)  # K not a multiple of 64
    monkeypatch.setattr(gk, "_capability", lambda index: (10, 0))
    assert not gk._wgmma_ok(p, p, 4096)  # no wgmma on Blackwell


def test_a_ring_of_two_slots_or_a_ragged_k_is_refused():
    """Two slots would let one warpgroup overwrite a slot the other's wgmma still reads."""
    with pytest.raises(ValueError, match="at least 3 slots"):
        gemm_wgmma.launch(None, None, None, 128, 128, 128, {}, (128, 128, 64, 8, 8, 2))
    with pytest.raises(gk.ShapeError, match="multiple of the tile depth"):
        gemm_wgmma.launch(None, None, None, 128, 128, 192, {}, (128, 128, 128, 8, 8, 3))


def test_the_warp_specialised_config_must_fit_the_register_file():
    """The CTA launches every warp at maxnreg: 20 warps at 104 registers cannot launch; a
    ragged K or a one-slot ring is refused too, and ws_config takes BK 64 where K needs it."""
    with pytest.raises(ValueError, match="register file"):
        gemm_wgmma.launch_ws(None, None, None, 128, 128, 128, {}, (128, 128, 128, 8, 3, 8, 80, 104))
    with pytest.raises(ValueError, match="at least 2 slots"):
        gemm_wgmma.launch_ws(None, None, None, 128, 128, 128, {}, (128, 128, 128, 8, 1, 4, 128, 168))
    with pytest.raises(gk.ShapeError, match="multiple of the tile depth"):
        gemm_wgmma.launch_ws(None, None, None, 128, 128, 192, {}, gemm_wgmma.WS_CONFIG)
    assert gemm_wgmma.ws_config(192)[2] == 64 and gemm_wgmma.ws_config(4096) == gemm_wgmma.WS_CONFIG
    # _rs_kernel: 8 MMA warps beside the decoders; K in whole 128-deep steps
    with pytest.raises(ValueError, match="register file"):
        gemm_wgmma.launch_rs(None, None, None, 128, 128, 128, {}, (128, 128, 128, 8, 4, 8, 96, 168))
    with pytest.raises(gk.ShapeError, match="multiple of the tile depth"):
        gemm_wgmma.launch_rs(None, None, None, 128, 128, 192, {})
    with pytest.raises(ValueError, match="one or two steps ahead"):
        gemm_wgmma.launch_rs(None, None, None, 128, 128, 128, {}, ahead=3)


@pytest.mark.parametrize("pair,k,kernel", [(("nvfp4", "nvfp4-2d"), 4096, "rs"), (("ufp4", "ufp4"), 8192, "rs"),
                                           (("nvfp4", "nvfp4-2d"), 192, "ws"), (("ue5m3", "ue5m3-2d"), 4096, "ws"),
                                           (("mxfp4", "mxfp4"), 4096, "ws")])
def test_packed_route_takes_the_faster_kernel(pair, k, kernel, monkeypatch):
    """launch_packed (gemm's Hopper route): _rs_kernel two steps ahead and persistent for
    f16-decoded pairs with E4M3 scales and K in whole 128-deep steps, _ws_kernel for the rest
    (UE5M3 pairs, f16 too, among them) and whenever a _ws_kernel config is given
    (kernels-h200.md, sessions 14, 16 and 23)."""
    ran = []
    monkeypatch.setattr(gemm_wgmma, "launch_rs", lambda *a, **kw: ran.append(("rs", kw.get("ahead"),
                                                                              kw.get("persistent"))))
    monkeypatch.setattr(gemm_wgmma, "launch_ws", lambda *a, **kw: ran.append(("ws", a[7])))
    plan = gk.split_plan(parse_fmt(F[pair[0]]), parse_fmt(F[pair[1]]))
    a = b = types.SimpleNamespace(spec=parse_fmt(F[pair[0]]))  # launch_packed reads the scale formats
    assert gemm_wgmma.packed_kernel(plan, k, (a.spec.scale, b.spec.scale)) == kernel
    gemm_wgmma.launch_packed(a, b, None, 128, 128, k, plan)
    gemm_wgmma.launch_packed(a, b, None, 128, 128, k, plan, gemm_wgmma.WS_CONFIG)
    assert gemm_wgmma.RS_AHEAD == 2 and gemm_wgmma.RS_PERSISTENT
    assert ran == [("rs", 2, True) if kernel == "rs" else ("ws", None), ("ws", gemm_wgmma.WS_CONFIG)]
