//! UTC calendar days: day numbers (days since 1970-01-01), `YYYY-MM-DD` dates and the
//! seconds to midnight. A leaf: the limits' daily caps, usage records, the ledger's date
//! filters and the calibration report's dates all count days the same way.

/// Seconds in a UTC day.
pub const DAY_SECS: u64 = 86_400;

/// Seconds from `unix_secs` to the next UTC midnight (1 to 86,400).
pub fn secs_to_utc_midnight(unix_secs: u64) -> u64 {
    DAY_SECS - unix_secs % DAY_SECS
}

/// `YYYY-MM-DD` of a UTC day number (days since 1970-01-01).
pub fn date_of(day: u64) -> String {
    // Howard Hinnant's civil_from_days, for days ≥ 0.
    let z = day as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// An instant written as Unix milliseconds or a UTC date `YYYY-MM-DD` (its midnight), in
/// Unix milliseconds.
pub fn instant_ms(text: &str) -> Option<i64> {
    text.parse::<i64>()
        .ok()
        .or_else(|| day_of(text).map(|day| day as i64 * (DAY_SECS as i64) * 1000))
}

/// The UTC day number of `YYYY-MM-DD`, or `None` when it is not a real date from 1970 on.
pub fn day_of(date: &str) -> Option<u64> {
    let b = date.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = &date[r];
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    // days_from_civil.
    let y2 = if m <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let day = u64::try_from(days).ok()?;
    // 2026-02-31 would roll into March: refuse it.
    (date_of(day) == date).then_some(day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_day_numbers_round_trip() {
        assert_eq!(date_of(0), "1970-01-01");
        assert_eq!(day_of("1970-01-01"), Some(0));
        assert_eq!(date_of(20_000), "2024-10-04");
        for day in [0, 59, 365, 11_016, 19_782, 20_423, 30_000] {
            assert_eq!(day_of(&date_of(day)), Some(day), "{day}");
        }
        assert_eq!(day_of("2024-02-29"), Some(19_782));
        for bad in [
            "2023-02-29",
            "2026-13-01",
            "2026-1-01",
            "1969-12-31",
            "today",
            "",
        ] {
            assert_eq!(day_of(bad), None, "{bad}");
        }
    }
}
