//! Criterion benches of the codec hot paths: quantize (each preset, RTNE and SR,
//! row-wise, column-wise and 16x16 tiles), dequantize, Philox, RHT.
//! `cargo bench -p fourcast-core --bench codecs`; FOURCAST_THREADS caps the threads.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use fourcast_core::hadamard;
use fourcast_core::quant::{self, Axis, Block, Format, Options};
use fourcast_core::rng;
use fourcast_core::rounding::Rounding;

const ROWS: usize = 1024;
const COLS: usize = 4096;

fn data() -> Vec<f32> {
    // Deterministic heavy-ish tailed values without an RNG dependency.
    (0..ROWS * COLS)
        .map(|i| {
            let u = rng::rand(1, i as u64) as f64 + 1e-7;
            let v = rng::rand(2, i as u64) as f64;
            ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
        })
        .collect()
}

fn bench_quantize(c: &mut Criterion) {
    let x = data();
    let mut g = c.benchmark_group("quantize");
    g.throughput(Throughput::Bytes((x.len() * 4) as u64));
    g.sample_size(10);
    for preset in ["nvfp4", "mxfp4", "e1m2", "int4"] {
        let fmt = Format::preset(preset).unwrap();
        for rounding in [Rounding::Rtne, Rounding::Sr] {
            let opts = Options {
                rounding,
                seed: 7,
                ..Options::default()
            };
            g.bench_function(format!("{preset}/{}", rounding.name()), |b| {
                b.iter(|| {
                    quant::quantize(black_box(&x), ROWS, COLS, Axis::Last, &fmt, &opts).unwrap()
                })
            });
        }
    }
    let nv = Format::preset("nvfp4").unwrap();
    let opts = Options::default();
    g.bench_function("nvfp4/axis0", |b| {
        b.iter(|| quant::quantize(black_box(&x), ROWS, COLS, Axis::First, &nv, &opts).unwrap())
    });
    let tiles = Format {
        block: Block::Tile16,
        ..nv
    };
    g.bench_function("nvfp4/tile16", |b| {
        b.iter(|| quant::quantize(black_box(&x), ROWS, COLS, Axis::Last, &tiles, &opts).unwrap())
    });
    let supplied = Options {
        tensor_amax: Some(4.0),
        ..Options::default()
    };
    g.bench_function("nvfp4/supplied-amax", |b| {
        b.iter(|| quant::quantize(black_box(&x), ROWS, COLS, Axis::Last, &nv, &supplied).unwrap())
    });
    let q = quant::quantize(&x, ROWS, COLS, Axis::Last, &nv, &opts).unwrap();
    g.bench_function("nvfp4/dequantize", |b| {
        b.iter(|| {
            quant::dequantize(
                &q.codes,
                &q.scales,
                ROWS,
                COLS,
                q.tensor_scale,
                Axis::Last,
                &nv,
            )
            .unwrap()
        })
    });
    g.finish();
}

fn bench_rng_rht(c: &mut Criterion) {
    let mut g = c.benchmark_group("rng_rht");
    g.sample_size(10);
    let n = 1 << 20;
    g.throughput(Throughput::Elements(n as u64));
    let mut out = vec![0f32; n];
    g.bench_function("rand_run", |b| {
        b.iter(|| rng::rand_run(7, 0, black_box(&mut out)))
    });
    let x = data();
    g.throughput(Throughput::Bytes((x.len() * 4) as u64));
    let signs = hadamard::signs(16, "te", 0).unwrap();
    g.bench_function("rht16", |b| {
        b.iter(|| hadamard::rht(black_box(&x), ROWS, COLS, 16, &signs, false).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench_quantize, bench_rng_rht);
criterion_main!(benches);
