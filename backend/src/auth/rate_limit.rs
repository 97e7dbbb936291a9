//! Throttling of the routes that work without a session, so guessing and flooding get no faster
//! by sending more requests:
//!
//! - login: at most [`MAX_FAILURES`] unsuccessful logins per (client IP, email) in [`WINDOW`],
//!   and at most [`MAX_ACCOUNT_FAILURES`] per email from all addresses together in
//!   [`ACCOUNT_WINDOW`] (so many addresses do not multiply an attacker's guesses; the price is
//!   that someone guessing can keep an account's owner waiting too, never longer than the window);
//! - registration: at most [`MAX_REGISTRATIONS`] per client IP in [`REGISTRATION_WINDOW`];
//! - refresh: at most [`MAX_REFRESHES`] per client IP in [`WINDOW`].
//!
//! Refused attempts get 429 and `Retry-After` before any password is checked. Every attempt
//! takes a slot *before* the work and only a successful login gives its slots back, so a burst of
//! parallel guesses cannot slip through between check and count. In memory: one server process
//! holds the counts (a restart forgets them, which only loosens the limit). Behind a reverse
//! proxy the IP is the proxy's; the per-account limit still holds.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed logins allowed per (IP, email) and window.
pub const MAX_FAILURES: usize = 5;
/// Length of the sliding window of the per-(IP, email) login and the refresh limits.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Failed logins allowed per email from all addresses together.
pub const MAX_ACCOUNT_FAILURES: usize = 10;
/// Window of the per-account limit.
pub const ACCOUNT_WINDOW: Duration = Duration::from_secs(10 * 60);
/// Registrations allowed per client IP and window.
pub const MAX_REGISTRATIONS: usize = 20;
/// Window of the registration limit.
pub const REGISTRATION_WINDOW: Duration = Duration::from_secs(10 * 60);
/// Refreshes allowed per client IP and [`WINDOW`] (a page refreshes every 10 minutes).
pub const MAX_REFRESHES: usize = 30;
/// Above this many tracked keys, stale ones are dropped (bounds memory under a spray attack).
const PRUNE_ABOVE: usize = 10_000;

/// A sliding-window counter per key.
#[derive(Debug)]
pub struct Window {
    max: usize,
    length: Duration,
    hits: Mutex<HashMap<String, VecDeque<Instant>>>,
}

impl Window {
    pub fn new(max: usize, length: Duration) -> Self {
        Self {
            max,
            length,
            hits: Mutex::default(),
        }
    }

    /// Seconds until `key` has a free slot again, or `None` when it has one now.
    fn wait(
        &self,
        map: &mut HashMap<String, VecDeque<Instant>>,
        key: &str,
        now: Instant,
    ) -> Option<u64> {
        if map.len() > PRUNE_ABOVE {
            map.retain(|_, t| {
                t.back()
                    .is_some_and(|last| now.duration_since(*last) < self.length)
            });
        }
        let times = map.entry(key.to_owned()).or_default();
        while times
            .front()
            .is_some_and(|t| now.duration_since(*t) >= self.length)
        {
            times.pop_front();
        }
        (times.len() >= self.max).then(|| {
            let oldest = times.front().copied().unwrap_or(now);
            self.length
                .saturating_sub(now.duration_since(oldest))
                .as_secs()
                .max(1)
        })
    }

    /// Takes a slot for `key`: `Err(seconds to wait)` when its slots are used up.
    pub fn take(&self, key: &str) -> Result<(), u64> {
        let now = Instant::now();
        let mut map = self.hits.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = self.wait(&mut map, key, now) {
            return Err(w);
        }
        map.entry(key.to_owned()).or_default().push_back(now);
        Ok(())
    }

    /// Gives back the last slot `key` took (an attempt that never got to be judged).
    pub fn give_back(&self, key: &str) {
        let mut map = self.hits.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(times) = map.get_mut(key) {
            times.pop_back();
        }
    }

    /// Forgets the slots `key` has taken.
    pub fn forget(&self, key: &str) {
        let mut map = self.hits.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(key);
    }
}

/// The login limits: per (IP, email) and per email.
#[derive(Debug)]
pub struct LoginLimiter {
    per_ip: Window,
    per_account: Window,
}

impl Default for LoginLimiter {
    fn default() -> Self {
        Self {
            per_ip: Window::new(MAX_FAILURES, WINDOW),
            per_account: Window::new(MAX_ACCOUNT_FAILURES, ACCOUNT_WINDOW),
        }
    }
}

fn key(ip: &str, email: &str) -> String {
    format!("{ip}|{}", email.to_lowercase())
}

impl LoginLimiter {
    /// Takes a slot of each limit for one attempt: `Err(seconds to wait)` when either is used up.
    pub fn attempt(&self, ip: &str, email: &str) -> Result<(), u64> {
        self.per_ip.take(&key(ip, email))?;
        self.per_account.take(&email.to_lowercase())
    }

    /// Gives back the slots of an attempt that failed on the server's side (the database down),
    /// not on the password.
    pub fn abandoned(&self, ip: &str, email: &str) {
        self.per_ip.give_back(&key(ip, email));
        self.per_account.give_back(&email.to_lowercase());
    }

    /// Forgets the attempts of a key after a successful login.
    pub fn succeeded(&self, ip: &str, email: &str) {
        self.per_ip.forget(&key(ip, email));
        self.per_account.forget(&email.to_lowercase());
    }
}

/// Every limit of the unauthenticated routes.
#[derive(Debug)]
pub struct Limits {
    pub login: LoginLimiter,
    pub register: Window,
    pub refresh: Window,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            login: LoginLimiter::default(),
            register: Window::new(MAX_REGISTRATIONS, REGISTRATION_WINDOW),
            refresh: Window::new(MAX_REFRESHES, WINDOW),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sixth_attempt_in_a_minute_is_blocked_per_ip_and_email() {
        let l = LoginLimiter::default();
        for _ in 0..MAX_FAILURES {
            assert_eq!(l.attempt("1.2.3.4", "A@x.org"), Ok(()));
        }
        let wait = l.attempt("1.2.3.4", "a@x.org");
        assert!(matches!(wait, Err(s) if (1..=60).contains(&s)), "{wait:?}");
        assert_eq!(
            l.attempt("5.6.7.8", "a@x.org"),
            Ok(()),
            "another IP is not blocked"
        );
        assert_eq!(
            l.attempt("1.2.3.4", "b@x.org"),
            Ok(()),
            "another email is not blocked"
        );
        l.succeeded("1.2.3.4", "a@x.org");
        assert_eq!(l.attempt("1.2.3.4", "a@x.org"), Ok(()));
    }

    #[test]
    fn many_addresses_do_not_multiply_the_guesses_at_one_account() {
        let l = LoginLimiter::default();
        let allowed = (0..50)
            .filter(|i| {
                l.attempt(&format!("127.0.0.{}", i % 10 + 1), "a@x.org")
                    .is_ok()
            })
            .count();
        assert_eq!(allowed, MAX_ACCOUNT_FAILURES);
        assert_eq!(
            l.attempt("127.0.0.99", "b@x.org"),
            Ok(()),
            "other accounts unaffected"
        );
    }
}
