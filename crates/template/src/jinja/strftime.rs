//! `strftime_now(format)`: Python's `datetime.strftime` in the C locale, over a naive instant.

use std::fmt::Write;
use std::time::{SystemTime, UNIX_EPOCH};

/// A calendar date and time of day, without a time zone (Python's naive `datetime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DateTime {
    /// The year (e.g. 2025).
    pub year: i32,
    /// The month, 1–12.
    pub month: u32,
    /// The day of the month, 1–31.
    pub day: u32,
    /// The hour, 0–23.
    pub hour: u32,
    /// The minute, 0–59.
    pub minute: u32,
    /// The second, 0–59.
    pub second: u32,
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i32, m: u32, d: u32) -> i64 {
    let y = i64::from(y) - i64::from(m <= 2);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

impl DateTime {
    /// The current time in UTC.
    pub fn now_utc() -> Self {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Self::from_unix(i64::try_from(secs).unwrap_or(0))
    }

    /// The UTC date and time `secs` seconds after the Unix epoch.
    pub fn from_unix(secs: i64) -> Self {
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        // The casts cannot truncate: each value is range-limited by the arithmetic above.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        DateTime {
            year: year as i32,
            month: month as u32,
            day: day as u32,
            hour: (rem / 3600) as u32,
            minute: (rem % 3600 / 60) as u32,
            second: (rem % 60) as u32,
        }
    }

    /// 0 = Monday.
    fn weekday(self) -> usize {
        // 1970-01-01 was a Thursday (3).
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let wd = (days_from_civil(self.year, self.month, self.day) + 3).rem_euclid(7) as usize;
        wd
    }

    fn day_of_year(self) -> i64 {
        days_from_civil(self.year, self.month, self.day) - days_from_civil(self.year, 1, 1) + 1
    }

    /// Formats like Python's `strftime` in the C locale. Unknown directives are copied.
    pub fn strftime(self, format: &str) -> String {
        let mut out = String::new();
        let mut chars = format.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            let Some(d) = chars.next() else {
                out.push('%');
                break;
            };
            self.directive(d, &mut out);
        }
        out
    }

    fn directive(self, d: char, out: &mut String) {
        let month = MONTHS[(self.month.clamp(1, 12) - 1) as usize];
        let day = DAYS[self.weekday()];
        let hour12 = match self.hour % 12 {
            0 => 12,
            h => h,
        };
        let _ = match d {
            'Y' => write!(out, "{}", self.year),
            'y' => write!(out, "{:02}", self.year.rem_euclid(100)),
            'm' => write!(out, "{:02}", self.month),
            'd' => write!(out, "{:02}", self.day),
            'e' => write!(out, "{:2}", self.day),
            'H' => write!(out, "{:02}", self.hour),
            'I' => write!(out, "{hour12:02}"),
            'M' => write!(out, "{:02}", self.minute),
            'S' => write!(out, "{:02}", self.second),
            'p' => write!(out, "{}", if self.hour < 12 { "AM" } else { "PM" }),
            'B' => write!(out, "{month}"),
            'b' | 'h' => write!(out, "{}", &month[..3]),
            'A' => write!(out, "{day}"),
            'a' => write!(out, "{}", &day[..3]),
            'j' => write!(out, "{:03}", self.day_of_year()),
            'w' => write!(out, "{}", (self.weekday() + 1) % 7),
            'u' => write!(out, "{}", self.weekday() + 1),
            'f' => write!(out, "000000"),
            'F' => write!(out, "{}-{:02}-{:02}", self.year, self.month, self.day),
            'T' => write!(
                out,
                "{:02}:{:02}:{:02}",
                self.hour, self.minute, self.second
            ),
            'c' => write!(
                out,
                "{} {} {:2} {:02}:{:02}:{:02} {}",
                &day[..3],
                &month[..3],
                self.day,
                self.hour,
                self.minute,
                self.second,
                self.year
            ),
            'z' | 'Z' => Ok(()),
            '%' => write!(out, "%"),
            other => write!(out, "%{other}"),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_python() {
        let t = DateTime {
            year: 2025,
            month: 6,
            day: 15,
            hour: 12,
            minute: 0,
            second: 0,
        };
        assert_eq!(t.strftime("%d %b %Y"), "15 Jun 2025");
        assert_eq!(t.strftime("%Y-%m-%d"), "2025-06-15");
        assert_eq!(t.strftime("%B %d, %Y"), "June 15, 2025");
        assert_eq!(t.strftime("%A %j %I%p %%"), "Sunday 166 12PM %");
    }

    #[test]
    fn unix_time_converts_to_the_calendar() {
        let t = DateTime::from_unix(1_749_988_800);
        assert_eq!((t.year, t.month, t.day, t.hour), (2025, 6, 15, 12));
        assert_eq!(
            DateTime::from_unix(0).strftime("%F %T %a"),
            "1970-01-01 00:00:00 Thu"
        );
    }
}
