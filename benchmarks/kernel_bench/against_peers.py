"""The PyTorch peers (benchmarks/peers.py), eager and torch.compile'd: the one-copy NVFP4
peers, and each row+col quantizer call against its own peer."""

from __future__ import annotations

import traceback

import torch

from fourcast.kernels import fake_quant as fk
from fourcast.kernels import quantize as qk
from fourcast.kernels import reference as ref

import peers as pp  # benchmarks/peers.py: the PyTorch peers
from kernel_bench.harness import BIG, DEV, F, QSIZES, RES, SMOKE, left, log, ms, qbytes, rand, save, section


@section("peers eager / torch.compile")
def peers():
    x = rand(BIG)
    want = fk.fake_quant(x, F["nvfp4"])
    got = pp.nvfp4_fake_quant(x)
    RES["peers"]["eager_fq_matches_fourcast_frac"] = float((got == want).float().mean())
    RES["peers"]["eager_fq_ms"] = ms(lambda: pp.nvfp4_fake_quant(x), rep=50)
    RES["peers"]["eager_pack_ms"] = ms(lambda: pp.nvfp4_pack(x), rep=50)
    fq_c = torch.compile(pp.nvfp4_fake_quant) if not SMOKE else pp.nvfp4_fake_quant
    fq_c(x)
    RES["peers"]["compiled_fq_ms"] = ms(lambda: fq_c(x))
    pk_c = torch.compile(pp.nvfp4_pack) if not SMOKE else pp.nvfp4_pack
    pk_c(x)
    RES["peers"]["compiled_pack_ms"] = ms(lambda: pk_c(x))
    log(RES["peers"])


def peer_calls(x, amax):
    """(name, fourcast's call, its PyTorch peer's kwargs) for the row+col NVFP4 calls of the
    quantizer target: with and without the column RHT16 and SR, amax fresh or given."""
    nv, s16 = F["nvfp4"], ref.rht_signs(16, "te").to(DEV)

    def rowcol(rounding, rht, amax_in):
        return lambda: qk.quantize_rowcol(x, nv, nv, rounding, rounding, 1, 0, None, rht, amax_in, amax_in)

    yield "row+col nvfp4, amax pass", rowcol("rtne", None, None), dict()
    yield "row+col nvfp4 delayed", rowcol("rtne", None, amax), dict(amax=amax)
    yield "row+col nvfp4 delayed, SR16", rowcol("sr16", None, amax), dict(amax=amax, sr=True)
    yield "row+col nvfp4 delayed, col RHT16", rowcol("rtne", (16, s16), amax), dict(amax=amax, rht=True)
    yield "row+col nvfp4 delayed, col RHT16 + SR16 (TE dY)", rowcol("sr16", (16, s16), amax), dict(
        amax=amax, rht=True, sr=True)
    yield "row+col nvfp4 delayed, col RHT16 + SR (numerics.md stream)", rowcol("sr", (16, s16), amax), dict(
        amax=amax, rht=True, sr=True)


def compiled_peer(x, kw, h16):
    """(benchmarks/peers.py's row+col NVFP4 call under torch.compile, its arguments) for a
    peer_calls entry's kwargs. A fresh compile per call and shape: past dynamo's recompile
    limit a function runs eagerly without an error; fullgraph: no silent graph breaks either."""
    args = (x, kw.get("amax"), h16 if kw.get("rht") else None, kw.get("sr", False))
    if SMOKE:
        return pp.nvfp4_rowcol, args
    torch._dynamo.reset()
    return torch.compile(pp.nvfp4_rowcol, dynamic=False, fullgraph=True), args


@section("quantizer against its PyTorch peer, call by call")
def peer_quant():
    """Each row+col NVFP4 call of the quantizer target beside benchmarks/peers.py doing the
    same work (eager and torch.compile'd), at QSIZES: times, fourcast's fraction of copy
    bandwidth, the speed-ups, and how the peer's bytes agree with fourcast's (equal for
    RTNE without RHT; SR and the RHT's f32 matmul: within one grid step)."""
    h16 = pp.hadamard16(device=DEV)
    out = RES.setdefault("peer_quant", [])
    copy = RES["ceilings"].get("copy_tbps", 4.27)
    for (r, c) in QSIZES:
        x = rand((r, c))
        amax = x.abs().amax().float()
        for name, ours, kw in peer_calls(x, amax):
            if left() < 60:
                RES["errors"].append(f"peer_quant {name} {r}x{c}: skipped (budget)")
                continue
            try:
                _peer_call(name, ours, kw, x, h16, (r, c), out, copy)
            except Exception as exc:  # one call's compile or run failing must not lose the others
                RES["errors"].append(f"peer_quant {name} {r}x{c}: {exc!r}")
                traceback.print_exc()
        del x
        save()


def _peer_call(name, ours, kw, x, h16, shape, out, copy):
    """One row+col call of peer_quant: its peer compiled afresh, the bytes compared, the three
    timed; a row appended to out."""
    r, c = shape
    compiled, args = compiled_peer(x, kw, h16)

    def peer(args=args):
        return pp.nvfp4_rowcol(*args)

    got = ours()
    p_row, p_col = compiled(*args)
    agree = {axis: pp.agreement(p, (o.codes, o.scales)) for axis, p, o in (("row", p_row, got[0]),
                                                                           ("col", p_col, got[1]))}
    exact = not kw.get("sr") and not kw.get("rht")
    ok = all(a["within_one_step"] for a in agree.values()) and (
        not exact or all(a["codes_equal"] == 1.0 and a["scales_equal"] == 1.0 for a in agree.values()))
    RES["checks"].append(dict(what=f"peer {name} {r}x{c}: " + ("bytes = fourcast's" if exact else
                                                                "within one grid step of fourcast's"), ok=ok))
    t, t_eager, t_comp = ms(ours), ms(peer, rep=50), ms(lambda: compiled(*args))
    frac = qbytes(r, c, 16, 2) / (t * 1e-3) / 1e12 / copy
    out.append(dict(call=name, shape=f"{r}x{c}", ms=t, eager_ms=t_eager, compiled_ms=t_comp, frac_copy=frac,
                    vs_compiled=t_comp / t, vs_eager=t_eager / t, agreement=agree))
    log(f"peer {name} {r}x{c}: fourcast {t * 1e3:.1f} us ({frac:.0%} of copy), torch.compile "
        f"{t_comp * 1e3:.1f} us ({t_comp / t:.1f}x), eager {t_eager * 1e3:.0f} us ({t_eager / t:.0f}x); {agree}")
