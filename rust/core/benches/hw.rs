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
        b.iter(|| {
            step(black_box(&b200), &model, &nvfp4, &cfg)
                .unwrap()
                .step_time_s
        })
    });
    c.bench_function("step moe-8b ufp4 b200", |b| {
        b.iter(|| {
            step(black_box(&b200), &moe, &ufp4, &cfg)
                .unwrap()
                .step_time_s
        })
    });
    c.bench_function("step + report llama3-8b nvfp4 b200", |b| {
        b.iter(|| {
            let r = step(black_box(&b200), &model, &nvfp4, &cfg).unwrap();
            r.report(&b200, &model, &nvfp4, &cfg).gemms.len()
        })
    });
    // A what-if sweep: 9 GPUs x 8 recipes x 5 models x 3 native sets = 1080 steps.
    let profiles: Vec<Profile> = hw::names()
        .iter()
        .map(|n| Profile::load(n).unwrap())
        .collect();
    let recipes: Vec<Recipe> = fourcast_core::recipe::PRESETS
        .iter()
        .map(|r| Recipe::preset(r).unwrap())
        .collect();
    let models: Vec<ModelSpec> = hw::model::MODELS
        .iter()
        .map(|m| ModelSpec::preset(m).unwrap())
        .collect();
    let native_sets: Vec<Vec<String>> = vec![vec![], vec!["ue5m3".into()], vec!["e1m2".into()]];
    let mut sweep = c.benchmark_group("sweep");
    sweep.sample_size(10);
    sweep.bench_function("1080 configurations", |b| {
        b.iter(|| {
            let mut total = 0.0;
            for p in &profiles {
                for n in &native_sets {
                    let hw = hw::machine(p, n).unwrap();
                    for m in &models {
                        for r in &recipes {
                            total += step(&hw, m, r, &cfg).unwrap().step_time_s;
                        }
                    }
                }
            }
            total
        })
    });
    sweep.finish();
    let natives = vec!["ue5m3".to_string(), "e1m2".to_string()];
    let profile = Profile::load("b300").unwrap();
    c.bench_function("machine + natives + step (b300, ue5m3)", |b| {
        b.iter(|| {
            let hw = hw::machine(black_box(&profile), &natives).unwrap();
            step(&hw, &model, &Recipe::preset("ue5m3").unwrap(), &cfg)
                .unwrap()
                .step_time_s
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
