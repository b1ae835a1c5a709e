//! The fitting maths tested on synthetic rows whose true temperature and bias are known.

use super::temperature::bias_objective;
use super::*;

/// Rows whose true distribution is `softmax(ln p / t + bias)`, labels drawn from it.
fn synthetic(n: usize, k: usize, t: f64, bias: &[f64], seed: u64) -> Vec<Row> {
    let mut rng = SplitMix64::new(seed);
    (0..n)
        .map(|_| {
            let z: Vec<f64> = (0..k).map(|_| 2.5 * rng.normal()).collect();
            let p = softmax(&z);
            let truth = apply(&p, t, bias);
            let label = rng.categorical(&truth);
            Row::new(p, label).expect("valid row")
        })
        .collect()
}

#[test]
fn golden_section_finds_a_parabola_minimum() {
    let x = golden_section(|x| (x - 0.7).powi(2), -3.0, 4.0, 60);
    assert!((x - 0.7).abs() < 1e-9);
}

#[test]
fn temperature_is_recovered() {
    for &t in &[0.5, 1.0, 2.5] {
        let rows = synthetic(6000, 3, t, &[], 11);
        let fit = fit_temperature(&rows);
        assert!((fit / t - 1.0).abs() < 0.08, "true {t}, fitted {fit}");
    }
}

#[test]
fn fitted_temperature_lowers_nll_and_shrinks_toward_one() {
    let rows = synthetic(3000, 2, 2.0, &[], 5);
    let t = fit_temperature(&rows);
    assert!(mean_nll(&rows, t) < mean_nll(&rows, 1.0));
    // With 4 rows the (5/n)(ln T)² penalty dominates: T stays near 1.
    let few = fit_temperature(&rows[..4]);
    assert!((few.ln()).abs() < t.ln().abs());
    assert_eq!(fit_temperature(&[]), 1.0);
}

#[test]
fn formula_is_a_weighted_least_squares_line() {
    let (a, b) = (0.9, -0.1);
    let groups: Vec<GroupFit> = [2usize, 4, 10, 50]
        .iter()
        .map(|&n| GroupFit {
            options: n,
            rows: 100 + n,
            temperature: (a + b * (n as f64).ln()).exp(),
        })
        .collect();
    let (fa, fb) = fit_formula(&groups);
    assert!((fa - a).abs() < 1e-12 && (fb - b).abs() < 1e-12);
    // Weights: the heavy group pulls the line.
    let two = [
        GroupFit {
            options: 2,
            rows: 1,
            temperature: 1.0,
        },
        GroupFit {
            options: 2,
            rows: 3,
            temperature: 1f64.exp(),
        },
    ];
    let (a2, b2) = fit_formula(&two);
    assert!((a2 - 0.75).abs() < 1e-12);
    assert_eq!(b2, 0.0);
    assert_eq!(fit_formula(&[]), (0.0, 0.0));
    // The written formula is read back by the service's own code.
    let c = crate::calibration::Calibration { a: fa, b: fb };
    assert!((c.temperature(10) - groups[2].temperature).abs() < 1e-12);
}

#[test]
fn temperature_and_bias_are_recovered() {
    let bias = [0.6, -0.2, -0.4];
    let rows = synthetic(12000, 3, 1.8, &bias, 3);
    let fit = fit_temperature_bias(&rows).expect("fits");
    assert!(
        (fit.temperature / 1.8 - 1.0).abs() < 0.08,
        "{}",
        fit.temperature
    );
    assert!(fit.bias.iter().sum::<f64>().abs() < 1e-9);
    for (f, b) in fit.bias.iter().zip(bias) {
        assert!((f - b).abs() < 0.1, "{:?} vs {bias:?}", fit.bias);
    }
    // Without a true bias the fitted one stays small.
    let plain = fit_temperature_bias(&synthetic(6000, 2, 0.7, &[], 9)).expect("fits");
    assert!((plain.temperature / 0.7 - 1.0).abs() < 0.08);
    assert!(plain.bias.iter().all(|b| b.abs() < 0.1));
    assert!(fit_temperature_bias(&[]).is_err());
}

#[test]
fn out_of_fold_rows_are_calibrated_by_the_other_folds() {
    let mut rng = SplitMix64::new(11);
    let rows: Vec<Row> = (0..600)
        .map(|_| {
            let z: Vec<f64> = (0..3).map(|_| 3.0 * rng.normal()).collect();
            let p = softmax(&z);
            let label = rng.categorical(&apply(&p, 2.0, &[0.4, 0.0, -0.4]));
            Row::new(p, label).expect("row")
        })
        .collect();
    let oof = out_of_fold(&rows, 5, 1).expect("fits");
    assert_eq!(oof.len(), rows.len());
    assert!(oof.iter().zip(&rows).all(|(o, r)| o.label == r.label));
    // Recalibrated: softer on average than the raw rows (drawn at T = 2), NLL improves,
    // and close to what the in-sample fit gives (600 rows leave each fold 480).
    let mean_top = |rs: &[Row]| rs.iter().map(Row::top).sum::<f64>() / rs.len() as f64;
    assert!(mean_top(&oof) < mean_top(&rows) - 0.05);
    assert!(mean_nll(&oof, 1.0) < mean_nll(&rows, 1.0));
    let all = fit_temperature_bias(&rows).expect("fits");
    let in_sample: Vec<Row> = rows
        .iter()
        .map(|r| Row {
            probs: apply(&r.probs, all.temperature, &all.bias),
            label: r.label,
        })
        .collect();
    assert!(mean_nll(&oof, 1.0) >= mean_nll(&in_sample, 1.0) - 1e-9);
    assert!(mean_nll(&oof, 1.0) < mean_nll(&in_sample, 1.0) + 0.05);
    assert!(out_of_fold(&rows[..3], 5, 1).is_err());
}

#[test]
fn bias_gradient_matches_finite_differences() {
    let rows = synthetic(50, 3, 1.3, &[0.3, 0.0, -0.3], 1);
    let logs: Vec<(Vec<f64>, usize)> = rows.iter().map(|r| (r.logs(), r.label)).collect();
    let theta = [0.2, 0.1, -0.3, 0.2];
    let (_, g) = bias_objective(&logs, &theta);
    let h = 1e-6;
    let mut tp = theta;
    tp[0] += h;
    let mut tm = theta;
    tm[0] -= h;
    let num = (bias_objective(&logs, &tp).0 - bias_objective(&logs, &tm).0) / (2.0 * h);
    assert!((num - g[0]).abs() < 1e-6);
    // Bias direction within Σb = 0: +h on b0, −h on b1.
    let mut tp = theta;
    tp[1] += h;
    tp[2] -= h;
    let mut tm = theta;
    tm[1] -= h;
    tm[2] += h;
    let num = (bias_objective(&logs, &tp).0 - bias_objective(&logs, &tm).0) / (2.0 * h);
    assert!((num - (g[1] - g[2])).abs() < 1e-6);
}

#[test]
fn lbfgs_minimises_rosenbrock() {
    let f = |x: &[f64]| {
        let (a, b) = (x[0], x[1]);
        (
            (1.0 - a).powi(2) + 100.0 * (b - a * a).powi(2),
            vec![
                -2.0 * (1.0 - a) - 400.0 * a * (b - a * a),
                200.0 * (b - a * a),
            ],
        )
    };
    let x = lbfgs(f, vec![-1.2, 1.0], 500, 1e-10);
    assert!(
        (x[0] - 1.0).abs() < 1e-5 && (x[1] - 1.0).abs() < 1e-5,
        "{x:?}"
    );
}

#[test]
fn conformal_cutoff_edge_cases() {
    let scores: Vec<f64> = (1..=9).map(|i| i as f64 / 10.0).collect();
    // n = 8 at 90%: rank ⌈9·0.9⌉ = 9 > 8 → 1.0.
    assert_eq!(conformal_cutoff(&scores[..8], 0.9), 1.0);
    // n = 9 at 90%: rank ⌈10·0.9⌉ = 9 → the 9th smallest score.
    let mut shuffled = scores.clone();
    shuffled.reverse();
    assert_eq!(conformal_cutoff(&shuffled, 0.9), 0.9);
    assert_eq!(conformal_cutoff(&[], 0.9), 1.0);
    // n = 19 at 90%: rank 18.
    let s19: Vec<f64> = (1..=19).map(|i| i as f64).collect();
    assert_eq!(conformal_cutoff(&s19, 0.9), 18.0);
}

#[test]
fn prediction_sets_global_and_per_label() {
    let rows = vec![
        Row::new(vec![0.9, 0.1], 0).expect("row"),
        Row::new(vec![0.6, 0.4], 1).expect("row"),
        Row::new(vec![0.2, 0.8], 1).expect("row"),
    ];
    assert!((score(&rows[1]) - 0.6).abs() < 1e-12);
    assert_eq!(prediction_set(&[0.7, 0.3], &[0.35]), vec![0]);
    assert_eq!(prediction_set(&[0.7, 0.3], &[0.7]), vec![0, 1]);
    assert_eq!(prediction_set(&[0.7, 0.3], &[1.0]), vec![0, 1]);
    // Per label at 50%: label 0 has one score (rank ⌈1⌉ = 1 → 0.1), label 1 has two
    // (rank ⌈1.5⌉ = 2 → 0.6).
    let cuts = conformal_cutoffs_per_label(&rows, 2, 0.5);
    assert!((cuts[0] - 0.1).abs() < 1e-12 && (cuts[1] - 0.6).abs() < 1e-12);
    assert_eq!(prediction_set(&[0.5, 0.5], &cuts), vec![1]);
}

// The four threshold cases hold at ε = 0.1, δ = 0.05 (minimum 29 answers):
// at ε = δ = 0.05 the minimum is 59, so the 40 tied answers could never be accepted.
const EPS: f64 = 0.1;
const DELTA: f64 = 0.05;

#[test]
fn automation_minimum_sizes() {
    assert_eq!(minimum_answers(0.1, 0.05), 29);
    assert_eq!(minimum_answers(0.05, 0.05), 59);
}

#[test]
fn automation_all_right_gives_the_lowest_confidence() {
    let answers: Vec<(f64, bool)> = (0..100).map(|i| (0.5 + i as f64 / 250.0, true)).collect();
    let a = automation_threshold(&answers, EPS, DELTA).expect("accepted");
    assert_eq!(a.threshold, 0.5);
    assert_eq!((a.level, a.answers, a.errors), (20, 100, 0));
}

#[test]
fn automation_errors_in_the_top_ten_give_none() {
    let answers: Vec<(f64, bool)> = (0..100)
        .map(|i| (0.999 - i as f64 / 250.0, i >= 10))
        .collect();
    assert_eq!(automation_threshold(&answers, EPS, DELTA), None);
}

#[test]
fn automation_twenty_answers_give_none() {
    let answers: Vec<(f64, bool)> = (0..20).map(|i| (0.9 + i as f64 / 1000.0, true)).collect();
    assert_eq!(automation_threshold(&answers, EPS, DELTA), None);
    assert_eq!(automation_threshold(&[], EPS, DELTA), None);
}

#[test]
fn automation_never_splits_ties() {
    let mut answers: Vec<(f64, bool)> = vec![(0.99, true); 40];
    answers.extend((0..60).map(|i| (0.8 - i as f64 / 1000.0, false)));
    let a = automation_threshold(&answers, EPS, DELTA).expect("accepted");
    assert_eq!(a.threshold, 0.99);
    assert_eq!((a.answers, a.errors), (40, 0));
    // At ε = δ = 0.05 the 40 are below the 59-answer minimum.
    assert_eq!(automation_threshold(&answers, 0.05, 0.05), None);
}

#[test]
fn splitmix64_matches_the_reference_sequence() {
    // First outputs for seed 1234567 from the reference C implementation.
    let mut r = SplitMix64::new(1234567);
    assert_eq!(r.next_u64(), 6457827717110365317);
    assert_eq!(r.next_u64(), 3203168211198807973);
}

#[test]
fn ece_bins_follow_array_split_and_equal_width() {
    // 17 rows into 15 bins: two bins of 2, thirteen of 1.
    let conf: Vec<f64> = (0..17).map(|i| 0.5 + i as f64 / 40.0).collect();
    let correct = vec![true; 17];
    let expected: f64 = {
        let mut e = 2.0 / 17.0 * (1.0 - (conf[0] + conf[1]) / 2.0);
        e += 2.0 / 17.0 * (1.0 - (conf[2] + conf[3]) / 2.0);
        e += conf[4..].iter().map(|c| (1.0 - c) / 17.0).sum::<f64>();
        e
    };
    assert!((ece_equal_size(&conf, &correct, 15) - expected).abs() < 1e-12);
    // Equal width: 0.55 and 0.6 share bin (0.5, 0.6]; 0.95 is alone.
    let bins = reliability_bins(&[0.55, 0.6, 0.95], &[true, false, true], 10);
    assert_eq!(bins[5].count, 2);
    assert!((bins[5].accuracy - 0.5).abs() < 1e-12);
    assert_eq!(bins[9].count, 1);
    let ece = ece_equal_width(&[0.55, 0.6, 0.95], &[true, false, true], 10);
    assert!((ece - (2.0 / 3.0 * 0.075 + 1.0 / 3.0 * 0.05)).abs() < 1e-12);
}

#[test]
fn metrics_on_a_small_table() {
    let rows = vec![
        Row::new(vec![0.8, 0.2], 0).expect("row"),
        Row::new(vec![0.7, 0.3], 0).expect("row"),
        Row::new(vec![0.4, 0.6], 1).expect("row"),
        Row::new(vec![0.9, 0.1], 1).expect("row"),
    ];
    let m = metrics(&rows, 0);
    assert_eq!(m.n, 4);
    assert!((m.accuracy - 0.75).abs() < 1e-12);
    assert!((m.majority_share - 0.5).abs() < 1e-12);
    assert!((m.normalised_accuracy.expect("mixed") - 0.5).abs() < 1e-12);
    // Class 0: tp 2, fp 1, fn 0 → F1 0.8; class 1: tp 1, fn 1 → 2/3.
    assert!((m.macro_f1 - (0.8 + 2.0 / 3.0) / 2.0).abs() < 1e-12);
    let brier = (2.0 * 0.04 + 2.0 * 0.09 + 2.0 * 0.16 + 2.0 * 0.81) / 4.0;
    assert!((m.brier - brier).abs() < 1e-12);
    assert!((m.excess_ece - (m.ece_equal_size_15 - m.expected_ece)).abs() < 1e-15);
    assert_eq!(metrics(&rows, 0), m, "seeded: reproducible");
}

#[test]
fn calibrated_data_has_small_excess_ece() {
    // Labels drawn from the probabilities themselves: calibrated by construction.
    let rows = synthetic(3000, 2, 1.0, &[], 21);
    let m = metrics(&rows, 7);
    assert!(m.excess_ece.abs() < 0.02, "{m:?}");
    // Overconfident data (true T = 2.5 read at T = 1) is not.
    let over = metrics(&synthetic(3000, 2, 2.5, &[], 22), 7);
    assert!(over.excess_ece > 0.05, "{over:?}");
}
