use super::*;
use crate::calibration::fit::SplitMix64;

const T0: i64 = 1_700_000_000_000; // a Tuesday

fn answer<'a>(key: &'a str, at_ms: i64, p: &'a [f64]) -> Answer<'a> {
    let answer = crate::calibration::argmax(p);
    Answer {
        key,
        model: "m",
        kind: "noul",
        layout: "accuracy",
        class: Class::Raw,
        at_ms,
        probabilities: p,
        answer,
        confidence: p[answer],
        option_mass: Some(0.5),
    }
}

/// Noul answers with P(option 0) drawn uniformly and outcomes drawn from the same
/// probabilities, `share` of them true in expectation shifted by `bias`.
fn rows(n: usize, seed: u64) -> Vec<([f64; 2], usize)> {
    let mut rng = SplitMix64::new(seed);
    (0..n)
        .map(|_| {
            let p0 = rng.next_f64();
            let truth = usize::from(rng.next_f64() >= p0);
            ([p0, 1.0 - p0], truth)
        })
        .collect()
}

fn day(figures: &[ShapeFigures]) -> &Figures {
    &figures[0].windows.last().expect("a window").figures
}

/// The equal-width ECE, accuracy, Brier and the reliability bins equal the offline
/// metrics' (`calibration::fit::metrics`, what `calibrate --check` reports) on the same
/// answers to 1e-9.
#[test]
fn outcome_figures_equal_the_offline_metrics() {
    let watch = Watch::new(Settings::default());
    let data = rows(2_000, 7);
    for (i, (p, truth)) in data.iter().enumerate() {
        let a = answer("k", T0 + i as i64, p);
        watch.record(&a);
        watch.outcome(&a, *truth, None);
    }
    let got = watch.figures(&Query::default(), Span::Day, T0);
    let f = day(&got);
    let conf: Vec<f64> = data.iter().map(|(p, _)| p[0].max(p[1])).collect();
    let correct: Vec<bool> = data
        .iter()
        .map(|(p, t)| crate::calibration::argmax(p) == *t)
        .collect();
    let want = crate::calibration::fit::ece_equal_width(&conf, &correct, 15);
    assert!((f.ece_equal_width_15.expect("outcomes") - want).abs() < 1e-9);
    let fit_rows: Vec<crate::calibration::fit::Row> = data
        .iter()
        .map(|(p, t)| crate::calibration::fit::Row {
            probs: p.to_vec(),
            label: *t,
        })
        .collect();
    let m = crate::calibration::fit::metrics(&fit_rows, 0);
    assert!((f.accuracy.expect("outcomes") - m.accuracy).abs() < 1e-9);
    assert!((f.brier.expect("outcomes") - m.brier).abs() < 1e-9);
    let bins = crate::calibration::fit::reliability_bins(&conf, &correct, 15);
    for (got, want) in f.reliability.iter().zip(&bins) {
        assert_eq!(got.count as usize, want.count);
        if want.count > 0 {
            assert!((got.confidence.expect("counted") - want.confidence).abs() < 1e-9);
            assert!((got.accuracy.expect("counted") - want.accuracy).abs() < 1e-9);
        }
    }
    // The equal-mass ECE is near the exact equal-size one (whole fine bins only).
    let exact = crate::calibration::fit::ece_equal_size(&conf, &correct, 15);
    assert!((f.ece_equal_mass_15.expect("outcomes") - exact).abs() < 0.02);
}

/// A window without answers shows no figure (not 0 % accurate), and one with answers but
/// no outcome shows the label-free figures only.
#[test]
fn empty_windows_are_empty_not_zero() {
    let watch = Watch::new(Settings::default());
    watch.record(&answer("k", T0, &[0.8, 0.2]));
    let got = watch.figures(&Query::default(), Span::Hour, T0 + 3 * ring::HOUR_MS);
    let windows = &got[0].windows;
    assert_eq!(windows.len(), 24);
    let empty = &windows.last().expect("now").figures;
    assert_eq!(empty.answers, 0);
    assert_eq!(empty.mean_confidence, None);
    assert_eq!(empty.accuracy, None);
    assert_eq!(empty.expected_accuracy, None);
    let held = &windows[windows.len() - 4].figures;
    assert_eq!(held.answers, 1);
    assert_eq!(held.mean_option_mass, Some(0.5));
    assert_eq!(
        (held.outcomes, held.accuracy, held.ece_equal_width_15),
        (0, None, None)
    );
}

/// An outcome replaced many times counts once, as its last value.
#[test]
fn a_replaced_outcome_counts_once() {
    let watch = Watch::new(Settings::default());
    let p = [0.9, 0.1];
    let a = answer("k", T0, &p);
    watch.record(&a);
    watch.outcome(&a, 1, None);
    for _ in 0..50 {
        watch.outcome(&a, 0, Some(1));
        watch.outcome(&a, 1, Some(0));
    }
    watch.outcome(&a, 0, Some(1));
    let f = watch.figures(&Query::default(), Span::Day, T0);
    let f = day(&f);
    assert_eq!((f.outcomes, f.accuracy), (1, Some(1.0)));
    assert!((f.brier.expect("one") - 0.02).abs() < 1e-12);
}

/// NaN, infinite or out-of-range numbers never reach a figure: such answers are left out.
#[test]
fn answers_with_bad_numbers_are_left_out() {
    let watch = Watch::new(Settings::default());
    for p in [[f64::NAN, 0.5], [1.5, -0.5], [f64::INFINITY, 0.0]] {
        let a = answer("k", T0, &p);
        watch.record(&Answer { answer: 1, ..a });
    }
    let mut a = answer("k", T0, &[0.6, 0.4]);
    a.confidence = f64::NAN;
    watch.record(&a);
    assert!(watch.figures(&Query::default(), Span::Day, T0).is_empty());
    let mut b = answer("k", T0, &[0.6, 0.4]);
    b.option_mass = Some(f64::NAN);
    watch.record(&b);
    let f = watch.figures(&Query::default(), Span::Day, T0);
    assert_eq!((day(&f).answers, day(&f).mean_option_mass), (1, None));
}

/// One key's figures never hold another's answers; the merged view holds both.
#[test]
fn keys_are_kept_apart() {
    let watch = Watch::new(Settings::default());
    watch.record(&answer("a", T0, &[0.9, 0.1]));
    watch.record(&answer("b", T0, &[0.6, 0.4]));
    watch.record(&answer("b", T0, &[0.6, 0.4]));
    let of = |key: Option<&str>| {
        let q = Query {
            key: key.map(str::to_owned),
            ..Query::default()
        };
        day(&watch.figures(&q, Span::Day, T0)).answers
    };
    assert_eq!((of(Some("a")), of(Some("b")), of(None)), (1, 2, 3));
    assert!(watch
        .figures(
            &Query {
                key: Some("c".into()),
                ..Query::default()
            },
            Span::Day,
            T0
        )
        .is_empty());
}

/// Past the cap on shapes, new shapes' answers are counted as dropped.
#[test]
fn shapes_are_capped() {
    let watch = Watch::new(Settings {
        max_shapes: 2,
        ..Settings::default()
    });
    for key in ["a", "b", "c", "d"] {
        watch.record(&answer(key, T0, &[0.7, 0.3]));
    }
    watch.record(&answer("a", T0, &[0.7, 0.3]));
    assert_eq!(watch.dropped(), 2);
    assert_eq!(watch.figures(&Query::default(), Span::Day, T0).len(), 1);
}

/// Against a complete reference: PSI and the EM prior's shift are near 0 (the EM estimate on
/// weakly informative posteriors moves by a few hundredths on 4,000 answers) on traffic like the
/// reference's, and large when the answers lean to one option; CBPE follows the
/// reference's accuracy per bin.
#[test]
fn drift_figures_move_with_the_traffic() {
    let (from, until) = (T0, T0 + ring::WEEK_MS);
    let watch = Watch::new(Settings {
        reference: Some((from, until)),
        ..Settings::default()
    });
    for (i, (p, truth)) in rows(4_000, 1).iter().enumerate() {
        let a = answer("k", from + i as i64 * 100_000, p);
        watch.record(&a);
        watch.outcome(&a, *truth, None);
    }
    let later = until + ring::DAY_MS;
    for (i, (p, _)) in rows(4_000, 2).iter().enumerate() {
        watch.record(&answer("k", later + i as i64, p));
    }
    let steady = watch.figures(&Query::default(), Span::Day, later);
    let f = day(&steady);
    assert!(f.psi.expect("a reference") < 0.01, "{:?}", f.psi);
    assert!(
        f.em_prior_shift.expect("a reference") < 0.08,
        "{:?}",
        f.em_prior_shift
    );
    let cbpe = f.expected_accuracy.expect("answers");
    assert!((cbpe - 0.75).abs() < 0.02, "{cbpe}");
    let shifted = later + ring::DAY_MS;
    let mut rng = SplitMix64::new(3);
    for i in 0..4_000 {
        let p0 = 0.9 + 0.1 * rng.next_f64();
        watch.record(&answer("k", shifted + i, &[p0, 1.0 - p0]));
    }
    let moved = watch.figures(&Query::default(), Span::Day, shifted);
    let f = day(&moved);
    assert!(f.psi.expect("a reference") > 0.2, "{:?}", f.psi);
    assert!(
        f.em_prior_shift.expect("a reference") > 0.2,
        "{:?}",
        f.em_prior_shift
    );
    assert!(watch.reference().expect("named").complete);
}

/// Without a named one, the reference is the first full week after the first answer, and
/// nothing compares against it before it ends.
#[test]
fn the_default_reference_is_the_first_full_week() {
    let watch = Watch::new(Settings::default());
    watch.record(&answer("k", T0, &[0.7, 0.3]));
    let r = watch.reference().expect("set by the first answer");
    assert!(r.from_ms > T0 && r.until_ms - r.from_ms == ring::WEEK_MS && !r.complete);
    assert_eq!(
        (r.from_ms - 4 * ring::DAY_MS) % ring::WEEK_MS,
        0,
        "a Monday"
    );
    let f = watch.figures(&Query::default(), Span::Day, T0);
    assert_eq!(day(&f).psi, None);
}

fn recent_of(watch: &Watch, key: Option<&str>) -> Option<Windowed> {
    let q = Query {
        key: key.map(str::to_owned),
        ..Query::default()
    };
    let shapes = watch.windowed(&q, Window::Recent, 0);
    assert!(shapes.len() <= 1, "one shape");
    let window = shapes.first().map(|s| {
        assert_eq!(s.windows.len(), 1, "one recent window per shape");
        s.windows[0].clone()
    });
    window
}

/// The recent window holds the last 250 to 300 answers whatever time they took: one an
/// hour or a thousand a second, the same count, and it runs from the earliest of them to
/// just after the latest.
#[test]
fn the_recent_window_holds_the_last_answers_at_any_rate() {
    for gap_ms in [1, ring::HOUR_MS] {
        let watch = Watch::new(Settings::default());
        let data = rows(1_001, 5);
        let mut seen = Vec::new();
        for (i, (p, _)) in data.iter().enumerate() {
            watch.record(&answer("k", T0 + i as i64 * gap_ms, p));
            let w = recent_of(&watch, None).expect("answers");
            seen.push(w.figures.answers);
            let first = i as i64 + 1 - w.figures.answers as i64;
            assert_eq!(
                (w.from_ms, w.until_ms),
                (T0 + first * gap_ms, T0 + i as i64 * gap_ms + 1)
            );
        }
        assert_eq!(&seen[..3], &[1, 2, 3]);
        assert_eq!(seen[299], 300, "six full blocks");
        assert_eq!(seen[300], 251, "the oldest block refilled");
        assert_eq!(seen[999], 300);
        assert_eq!(seen[1000], 251);
        assert!(seen.iter().all(|n| *n <= 300));
    }
}

/// A refilled block starts empty: the recent window's figures after 1,000 answers (with
/// outcomes) are a fresh watch's on the same last 300 answers alone.
#[test]
fn the_recent_window_forgets_older_answers() {
    let watch = Watch::new(Settings::default());
    let fresh = Watch::new(Settings::default());
    let data = rows(1_000, 9);
    for (i, (p, truth)) in data.iter().enumerate() {
        let a = answer("k", T0 + i as i64, p);
        watch.record(&a);
        watch.outcome(&a, *truth, None);
        if i >= 700 {
            fresh.record(&a);
            fresh.outcome(&a, *truth, None);
        }
    }
    let got = recent_of(&watch, None).expect("answers").figures;
    let want = recent_of(&fresh, None).expect("answers").figures;
    assert_eq!(got.answers, 300);
    assert_eq!(
        (got.answers, got.outcomes, &got.confidence_histogram),
        (want.answers, want.outcomes, &want.confidence_histogram)
    );
    let close = |a: Option<f64>, b: Option<f64>| {
        let (a, b) = (a.expect("a figure"), b.expect("a figure"));
        assert!((a - b).abs() < 1e-9, "{a} against {b}");
    };
    close(got.mean_confidence, want.mean_confidence);
    close(got.accuracy, want.accuracy);
    close(got.brier, want.brier);
    close(got.ece_equal_width_15, want.ece_equal_width_15);
}

/// An outcome counts in the recent window while its answer is there, once however often
/// it is replaced, and not once its answer's block was refilled.
#[test]
fn recent_outcomes_follow_their_answers() {
    let watch = Watch::new(Settings::default());
    let p = [0.9, 0.1];
    let first = answer("k", T0, &p);
    watch.record(&first);
    watch.outcome(&first, 1, None);
    for _ in 0..5 {
        watch.outcome(&first, 0, Some(1));
        watch.outcome(&first, 1, Some(0));
    }
    watch.outcome(&first, 0, Some(1));
    let w = recent_of(&watch, None).expect("answers").figures;
    assert_eq!((w.outcomes, w.accuracy), (1, Some(1.0)));
    for i in 1..=300 {
        watch.record(&answer("k", T0 + i, &p));
    }
    // The first answer's block was refilled: its outcome, replaced now, counts nowhere.
    watch.outcome(&first, 1, Some(0));
    let w = recent_of(&watch, None).expect("answers").figures;
    assert_eq!((w.answers, w.outcomes), (251, 0));
    let last = answer("k", T0 + 300, &p);
    watch.outcome(&last, 0, None);
    let w = recent_of(&watch, None).expect("answers").figures;
    assert_eq!((w.outcomes, w.accuracy), (1, Some(1.0)));
}

/// Each key's recent answers are its own; the merged view adds every key's.
#[test]
fn recent_windows_keep_keys_apart() {
    let watch = Watch::new(Settings::default());
    for i in 0..380 {
        watch.record(&answer("a", T0 + i, &[0.9, 0.1]));
    }
    for i in 0..20 {
        watch.record(&answer("b", T0 + i, &[0.6, 0.4]));
    }
    let count = |key| recent_of(&watch, key).map(|w| w.figures.answers);
    assert_eq!(
        (
            count(Some("a")),
            count(Some("b")),
            count(None),
            count(Some("c"))
        ),
        (Some(280), Some(20), Some(300), None)
    );
}

/// Why the recent window: 300 answers after the label prior moved, the recent window's EM
/// shift stands out while the day window, still holding the day's thousands of answers
/// from before, has barely moved.
#[test]
fn the_recent_window_sees_a_shift_the_day_dilutes() {
    let (from, until) = (T0, T0 + ring::WEEK_MS);
    let watch = Watch::new(Settings {
        reference: Some((from, until)),
        ..Settings::default()
    });
    for (i, (p, _)) in rows(4_000, 11).iter().enumerate() {
        watch.record(&answer("k", from + i as i64 * 100_000, p));
    }
    let day = until + ring::DAY_MS;
    for (i, (p, _)) in rows(5_000, 12).iter().enumerate() {
        watch.record(&answer("k", day + i as i64 * 1_000, p));
    }
    let steady = recent_of(&watch, None).expect("answers").figures;
    let steady = steady.em_prior_shift.expect("a complete reference");
    assert!(steady < 0.1, "{steady}");
    let mut rng = SplitMix64::new(13);
    let shifted = day + 5_000 * 1_000;
    for i in 0..300 {
        let p0 = 0.6 + 0.4 * rng.next_f64();
        watch.record(&answer("k", shifted + i * 1_000, &[p0, 1.0 - p0]));
    }
    let recent = recent_of(&watch, None).expect("answers").figures;
    let recent = recent.em_prior_shift.expect("a complete reference");
    let f = watch.figures(&Query::default(), Span::Day, shifted);
    let whole_day = self::day(&f).em_prior_shift.expect("a complete reference");
    assert!(recent > 0.2, "{recent}");
    assert!(whole_day < recent / 2.0, "day {whole_day}, recent {recent}");
}
