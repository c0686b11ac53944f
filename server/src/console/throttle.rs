//! Console sign-in throttling: nobody outside can lock an admin out.
//!
//! Failed sign-ins are counted in the database (so the rule holds across instances),
//! twice: per email *and source* (the TCP peer address; an IPv6 address counts as its
//! /64, which one host usually holds whole), and per email from everywhere. The rule
//! ([`gate`]):
//!
//! - [`PAIR_FAILURES_ALLOWED`] failures of one email from one source within
//!   [`WINDOW_MS`] refuse that pair until the window moves on: a guesser at one address
//!   is stopped;
//! - failures of the email from everywhere never refuse anyone; past
//!   [`DELAY_AFTER`] they make every further sign-in of that email wait a little
//!   before its password is checked, the wait doubling with every [`DELAY_AFTER`] more
//!   failures up to [`MAX_DELAY`]: guessers spread over many addresses are slowed,
//!   and the admin at their own address still gets in, at worst a few seconds later.
//!
//! The source is the connection's peer address, never a request header such as
//! `X-Forwarded-For`, which any client can write.

use std::net::IpAddr;
use std::time::Duration;

/// Failed sign-ins of one email from one source that refuse that pair.
pub const PAIR_FAILURES_ALLOWED: i64 = 10;
/// The window failures are counted in.
pub const WINDOW_MS: i64 = 15 * 60 * 1000;
/// Failures of one email from everywhere after which its sign-ins wait, and the step
/// (in failures) at which the wait doubles.
pub const DELAY_AFTER: i64 = 10;
/// The first wait, and the longest.
pub const FIRST_DELAY: Duration = Duration::from_millis(100);
pub const MAX_DELAY: Duration = Duration::from_secs(5);
/// Failures of one email kept for counting; enough to reach [`MAX_DELAY`] with room,
/// few enough that a flood cannot grow the table without end.
pub const EMAIL_FAILURES_KEPT: i64 = 200;

/// Recent failed sign-ins (within [`WINDOW_MS`]) of the email being signed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failures {
    /// From the source this attempt comes from.
    pub from_source: i64,
    /// From every source together.
    pub everywhere: i64,
}

/// What to do with a sign-in before its password is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Too many failures of this email from this source: refused, right password or not.
    Refuse,
    /// Checked after waiting this long (zero for most).
    Check { wait: Duration },
}

/// The rule of this module, for one sign-in attempt.
pub fn gate(f: Failures) -> Gate {
    if f.from_source >= PAIR_FAILURES_ALLOWED {
        return Gate::Refuse;
    }
    if f.everywhere < DELAY_AFTER {
        return Gate::Check {
            wait: Duration::ZERO,
        };
    }
    let doublings = ((f.everywhere - DELAY_AFTER) / DELAY_AFTER).min(16) as u32;
    let wait = FIRST_DELAY.saturating_mul(1 << doublings).min(MAX_DELAY);
    Gate::Check { wait }
}

/// The part of an address that counts as one source: an IPv4 address, or the /64 of an
/// IPv6 one (an IPv4-mapped IPv6 address is its IPv4 address).
pub fn source(ip: IpAddr) -> String {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
    }
}

/// The rate keys failures are counted under: per email and source, and per email.
pub fn keys(email: &str, ip: IpAddr) -> (String, String) {
    (
        format!("console-login:{email}|{}", source(ip)),
        format!("console-login:{email}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(from_source: i64, everywhere: i64) -> Gate {
        gate(Failures {
            from_source,
            everywhere,
        })
    }

    fn wait(ms: u64) -> Gate {
        Gate::Check {
            wait: Duration::from_millis(ms),
        }
    }

    #[test]
    fn ten_failures_from_one_source_refuse_that_source() {
        assert_eq!(at(9, 9), wait(0));
        assert_eq!(at(10, 10), Gate::Refuse);
        assert_eq!(at(50, 500), Gate::Refuse);
    }

    #[test]
    fn failures_from_elsewhere_slow_a_source_down_but_never_refuse_it() {
        assert_eq!(at(0, 9), wait(0));
        assert_eq!(at(0, 10), wait(100));
        assert_eq!(at(0, 19), wait(100));
        assert_eq!(at(0, 20), wait(200));
        assert_eq!(at(3, 30), wait(400));
        assert_eq!(at(0, 50), wait(1_600));
        assert_eq!(at(0, 60), wait(3_200));
        assert_eq!(at(0, 70), wait(5_000));
        assert_eq!(at(9, i64::MAX), wait(5_000));
    }

    #[test]
    fn a_source_is_an_ipv4_address_or_the_64_of_an_ipv6_one() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(source(ip("127.0.0.2")), "127.0.0.2");
        assert_eq!(source(ip("::ffff:10.1.2.3")), "10.1.2.3");
        assert_eq!(source(ip("2001:db8:1:2:aaaa::1")), "2001:db8:1:2::/64");
        assert_eq!(
            source(ip("2001:db8:1:2:ffff::9")),
            source(ip("2001:db8:1:2::1"))
        );
        assert_ne!(source(ip("2001:db8:1:3::1")), source(ip("2001:db8:1:2::1")));
        let (pair, email) = keys("a@example.com", ip("127.0.0.1"));
        assert_eq!(pair, "console-login:a@example.com|127.0.0.1");
        assert_eq!(email, "console-login:a@example.com");
    }
}
