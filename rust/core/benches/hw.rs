//! Speed of the hardware model: one training-step evaluation (llama3-8b, NVFP4, B200)
//! and a what-if sweep. Target: >= 10,000 step evaluations per second on one core.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use fourcast_core::hw::{self, step, Hw, ModelSpec, Profile, StepConfig};
use fourcast_core::recipe::Recipe;

fn bench(c: &mut Criterion) {
    let b200 = Hw::from_profile(&Profile::load("b200").unwrap());
    let model = ModelSpec::preset("llama3-8b").unwrap();
    let moe = ModelSpec::preset("moe-8b").unwrap();
    let cfg = StepConfig::default();
    let nvfp4 = Recipe::preset("nvfp4").unwrap();
    let ufp4 = Recipe::preset("ufp4").unwrap();
    c.bench_function("step llama3-8b nvfp4 b200", |b| {
        b.iter(|| step(black_box(&b200), &model, &nvfp4, &cfg).unwrap().step_time_s)
    });
    c.bench_function("step moe-8b ufp4 b200", |b| {
        b.iter(|| step(black_box(&b200), &moe, &ufp4, &cfg).unwrap().step_time_s)
    });
    c.bench_function("step + report llama3-8b nvfp4 b200", |b| {
        b.iter(|| {
            let r = step(black_box(&b200), &model, &nvfp4, &cfg).unwrap();
            r.report(&b200, &model, &nvfp4, &cfg).gemms.len()
        })
    });
    let natives = vec!["ue5m3".to_string(), "e1m2".to_string()];
    let profile = Profile::load("b300").unwrap();
    c.bench_function("machine + natives + step (b300, ue5m3)", |b| {
        b.iter(|| {
            let hw = hw::machine(black_box(&profile), &natives).unwrap();
            step(&hw, &model, &Recipe::preset("ue5m3").unwrap(), &cfg).unwrap().step_time_s
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
