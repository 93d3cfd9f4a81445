//! The evidence model's own tests: the optimiser against known optima
//! and finite differences, the file format against damage.

use super::features::Input;
use super::train::{self, Example, Options};
use super::*;

fn ex(features: &[(u32, f32)], label: usize) -> Example {
    Example {
        vector: features.to_vec(),
        label,
    }
}

#[test]
fn the_gradient_agrees_with_finite_differences() {
    let examples = vec![
        ex(&[(0, 1.0), (2, 0.5)], 0),
        ex(&[(1, 1.0), (2, 0.5)], 1),
        ex(&[(0, 0.3), (1, 0.7)], 2),
        ex(&[(2, 1.0)], 1),
    ];
    let classes = 3;
    let params = (3 + 1) * classes;
    let theta: Vec<f64> = (0..params)
        .map(|i| ((i * 37 % 11) as f64 - 5.0) / 7.0)
        .collect();
    let (_, grad) = train::objective_for_test(&examples, classes, 0.1, &theta);
    for i in 0..params {
        let h = 1e-6;
        let mut up = theta.clone();
        up[i] += h;
        let mut down = theta.clone();
        down[i] -= h;
        let numeric = (train::objective_for_test(&examples, classes, 0.1, &up).0
            - train::objective_for_test(&examples, classes, 0.1, &down).0)
            / (2.0 * h);
        assert!(
            (numeric - grad[i]).abs() < 1e-6,
            "parameter {i}: {numeric} vs {}",
            grad[i]
        );
    }
}

#[test]
fn with_no_features_and_no_penalty_the_optimum_is_the_class_frequencies() {
    // The known optimum of a bias-only multinomial model: softmax(b) is
    // the empirical distribution of the labels.
    let examples: Vec<Example> = [0, 0, 0, 1, 2, 2, 2, 2]
        .iter()
        .map(|&y| ex(&[], y))
        .collect();
    let model = train::train(
        &examples,
        vec!["a".into(), "b".into(), "c".into()],
        Options {
            lambda: 0.0,
            balance: 0.0,
            ..Options::default()
        },
    );
    let p = model.predict(&Input::default());
    let want = [3.0 / 8.0, 1.0 / 8.0, 4.0 / 8.0];
    for (got, want) in p.probabilities().iter().zip(want) {
        assert!((got - want).abs() < 1e-4, "{:?}", p.probabilities());
    }
}

fn toy() -> Model {
    let items = [
        ("rate limit exceeded, slow down", Some(429), 0),
        ("too many requests per minute", Some(429), 0),
        ("your credit balance is too low", Some(400), 1),
        ("insufficient balance, please top up", Some(402), 1),
        ("请求过于频繁", None, 0),
        ("账户余额不足", None, 1),
    ];
    let examples: Vec<Example> = items
        .iter()
        .map(|(text, status, y)| Example {
            vector: vector(&Input {
                text,
                status: *status,
                ..Input::default()
            }),
            label: *y,
        })
        .collect();
    train::train(
        &examples,
        vec!["rate_limit".into(), "billing".into()],
        Options::default(),
    )
}

#[test]
fn a_trained_model_reads_unseen_wording_of_a_family() {
    let m = toy();
    let p = m.predict(&Input {
        text: "balance too low to continue",
        status: Some(400),
        ..Input::default()
    });
    assert_eq!(m.reasons()[p.top().0], "billing", "{:?}", p.probabilities());
    let p = m.predict(&Input {
        text: "余额不足，请充值",
        ..Input::default()
    });
    assert_eq!(m.reasons()[p.top().0], "billing", "{:?}", p.probabilities());
    let sum: f32 = p.probabilities().iter().sum();
    assert!((sum - 1.0).abs() < 1e-5);
}

#[test]
fn training_is_deterministic_and_the_file_round_trips() {
    let a = toy().to_bytes();
    let b = toy().to_bytes();
    assert_eq!(a, b, "the same items give the same bytes");
    let back = Model::from_bytes(&a).unwrap();
    assert_eq!(back, toy());
    assert_eq!(back.to_bytes(), a);
}

#[test]
fn a_damaged_or_foreign_file_is_an_error_never_a_panic() {
    let bytes = toy().to_bytes();
    assert_eq!(
        Model::from_bytes(b"{\"not\": \"a model\"}"),
        Err(ModelError::NotAModel)
    );
    assert_eq!(Model::from_bytes(b""), Err(ModelError::NotAModel));
    let mut other = bytes.clone();
    other[8] = 9;
    assert_eq!(Model::from_bytes(&other), Err(ModelError::Version(9)));
    for cut in 0..bytes.len() {
        assert!(Model::from_bytes(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    for at in (8..bytes.len()).step_by(7) {
        let mut flipped = bytes.clone();
        flipped[at] ^= 0x40;
        assert!(Model::from_bytes(&flipped).is_err(), "flip at {at}");
    }
}

// Issue 44 item 16: a reason name is a rules identifier; a file whose
// names hold a terminal escape (checksum and all correct) is refused, so
// `model info` and `--explain` never print one.
#[test]
fn i44_16_reason_names_with_escapes_are_refused() {
    for bad in ["\u{1b}]0;owned\u{7}", "rate\nlimit", "", "9lives", "a b"] {
        let mut m = toy();
        m.reasons[0] = bad.to_string();
        assert_eq!(
            Model::from_bytes(&m.to_bytes()),
            Err(ModelError::Damaged(
                "a reason name that is not a rules identifier"
            )),
            "{bad:?}"
        );
    }
    let mut m = toy();
    m.reasons[0] = "_custom-reason2".into();
    assert!(Model::from_bytes(&m.to_bytes()).is_ok());
}

#[test]
fn an_explanation_names_features_as_text() {
    let m = toy();
    let input = Input {
        text: "rate limit exceeded",
        status: Some(429),
        ..Input::default()
    };
    let w = m.weighed(&input, 0, 10);
    assert_eq!(w.len(), 10);
    assert!(w.windows(2).all(|p| p[0].weight >= p[1].weight));
    assert!(
        w.iter()
            .any(|f| f.feature.contains("limit") || f.feature.contains("429")),
        "{w:?}"
    );
}

#[test]
fn cosine_of_a_vector_with_itself_is_one() {
    let v = vector(&Input {
        text: "model not found",
        status: Some(404),
        ..Input::default()
    });
    assert!((cosine(&v, &v) - 1.0).abs() < 1e-5);
    assert_eq!(cosine(&v, &[]), 0.0);
}

/// Issue 46, calibration: the temperature that fits cross-validated
/// predictions — above 1 for an overconfident model (its scores are
/// spread too far), below 1 for a modest one; the calibrated model keeps
/// its ranking, and the file keeps the temperature.
#[test]
fn the_temperature_tempers_an_overconfident_model_and_sharpens_a_modest_one() {
    // Two reasons; the model says reason 0 with log-odds `s`, right 3
    // times in 4: a calibrated model would say 0.75.
    let items = |s: f32| -> Vec<(Vec<f32>, Vec<usize>)> {
        (0..40)
            .map(|i| (vec![0.0, -s], vec![usize::from(i % 4 == 3)]))
            .collect()
    };
    let odds = 3f32.ln();
    let over = train::fit_temperature(&items(4.0 * odds));
    let modest = train::fit_temperature(&items(odds / 2.0));
    assert!((over - 4.0).abs() < 0.01, "{over}");
    assert!((modest - 0.5).abs() < 0.01, "{modest}");
    assert_eq!(train::fit_temperature(&[]), 1.0);
    // Several defensible labels: the likelihood of any of them.
    let either: Vec<(Vec<f32>, Vec<usize>)> =
        (0..10).map(|_| (vec![0.0, 0.0], vec![0, 1])).collect();
    assert!(train::fit_temperature(&either) > 0.0);

    let m = toy();
    let input = Input {
        text: "rate limit exceeded",
        status: Some(429),
        ..Input::default()
    };
    let before = m.predict(&input);
    let hot = m.clone().calibrated(2.0);
    let after = hot.predict(&input);
    assert_eq!(before.top().0, after.top().0);
    assert!(after.top().1 < before.top().1);
    assert_eq!(hot.trained().temperature, 2.0);
    let back = Model::from_bytes(&hot.to_bytes()).unwrap();
    assert_eq!(back.trained().temperature, 2.0);
    assert_eq!(back, hot);
}

/// Issue 46: class weights lift a rare reason — with `balance` 1 the
/// bias-only optimum is the uniform distribution, whatever the counts.
#[test]
fn balance_weighs_rare_reasons_up() {
    let examples: Vec<Example> = [0, 0, 0, 0, 0, 0, 0, 1]
        .iter()
        .map(|&y| ex(&[], y))
        .collect();
    let fit = |balance| {
        train::train(
            &examples,
            vec!["common".into(), "rare".into()],
            Options {
                lambda: 0.0,
                balance,
                ..Options::default()
            },
        )
        .predict(&Input::default())
        .probabilities()[1]
    };
    assert!((fit(0.0) - 1.0 / 8.0).abs() < 1e-3);
    assert!((fit(1.0) - 0.5).abs() < 1e-3, "{}", fit(1.0));
    assert!(fit(0.5) > fit(0.0) && fit(0.5) < fit(1.0));
}

/// Issue 47: format 3 stores `i8` weights and reads text with a new
/// tokenisation, format 4 a shorter text; a file of an earlier format
/// (weights for other features) is refused with the version, never read
/// with the wrong features.
#[test]
fn an_earlier_format_is_refused_with_its_version() {
    for old in [2u32, 3] {
        let mut bytes = toy().to_bytes();
        bytes[8..12].copy_from_slice(&old.to_le_bytes());
        let err = Model::from_bytes(&bytes).unwrap_err();
        assert_eq!(err, ModelError::Version(old));
        assert!(err.to_string().contains("retrain"), "{err}");
    }
}

/// The `i8` weights are the trained weights to within half a step of
/// their reason's scale (the largest weight / 127).
#[test]
fn quantised_weights_are_within_half_a_step() {
    let rows = vec![(5usize, vec![0.5f32, -0.25]), (9, vec![1.27, 0.003])];
    let t = Trained {
        temperature: 1.0,
        ..Trained::default()
    };
    let m = Model::from_parts(
        vec!["rate_limit".into(), "billing".into()],
        &[0.1, -0.1],
        &rows,
        t,
    );
    let steps = [1.27f32 / 127.0, 0.25 / 127.0];
    for (b, w) in &rows {
        for r in 0..2 {
            let got = m.weight(*b, r);
            assert!(
                (got - w[r]).abs() <= steps[r] / 2.0 + 1e-7,
                "{b}/{r}: {got} for {}",
                w[r]
            );
        }
    }
    assert_eq!(m.weight(9, 0), 1.27, "the largest weight is exact");
    let p = m
        .predict_vector(&[(5, 1.0), (9, 1.0)])
        .probabilities()
        .to_vec();
    let z = [0.1 + 0.5 + 1.27f32, -0.1 - 0.25 + 0.003];
    let want = 1.0 / (1.0 + (z[1] - z[0]).exp());
    assert!((p[0] - want).abs() < 1e-3, "{p:?} against {want}");
    assert_eq!(Model::from_bytes(&m.to_bytes()).unwrap(), m);
}

/// Issue 46: inverse document frequency. A bucket every example holds
/// keeps its value (idf 1); the weights are trained on the weighed
/// features and stored times the weight, so the model reads raw vectors
/// exactly as a model trained (without IDF) on the weighed vectors reads
/// weighed ones — up to the `i8` quantisation of each.
#[test]
fn idf_is_folded_into_the_stored_weights() {
    // Bucket 7 is in every example, 1 in one, 2 in two of four.
    let examples = vec![
        ex(&[(1, 1.0), (7, 0.5)], 0),
        ex(&[(2, 1.0), (7, 0.5)], 1),
        ex(&[(2, 0.6), (7, 0.5)], 1),
        ex(&[(7, 1.0)], 2),
    ];
    let n = examples.len() as f32;
    let idf = |b: u32| {
        let df = match b {
            1 => 1.0,
            2 => 2.0,
            _ => n,
        };
        ((1.0 + n) / (1.0 + df)).ln() + 1.0
    };
    let weighed: Vec<Example> = examples
        .iter()
        .map(|e| Example {
            vector: e.vector.iter().map(|&(b, x)| (b, x * idf(b))).collect(),
            label: e.label,
        })
        .collect();
    let reasons = || vec!["a".to_string(), "b".into(), "c".into()];
    let no_idf = Options {
        idf: false,
        ..Options::default()
    };
    let with = train::train(&examples, reasons(), Options::default());
    let plain = train::train(&weighed, reasons(), no_idf);
    for (raw, w) in examples.iter().zip(&weighed) {
        let a = with.predict_vector(&raw.vector);
        let b = plain.predict_vector(&w.vector);
        for (p, q) in a.probabilities().iter().zip(b.probabilities()) {
            assert!((p - q).abs() < 0.02, "{p} vs {q}");
        }
    }
    // And IDF changes the fit: without it the rare bucket 1 weighs less.
    let without = train::train(&examples, reasons(), no_idf);
    let p_with = with.predict_vector(&[(1, 1.0)]).probabilities()[0];
    let p_without = without.predict_vector(&[(1, 1.0)]).probabilities()[0];
    assert!(p_with > p_without, "{p_with} vs {p_without}");
}
