//! Login throttling: at most [`MAX_FAILURES`] unsuccessful logins per (client IP, email) in a
//! sliding window of [`WINDOW`]; further attempts are refused with 429 and `Retry-After` before
//! the password is even checked, so guessing gets no faster by sending more requests. Every
//! attempt takes a slot *before* the password check and only a success gives it back, so a burst
//! of parallel guesses cannot slip through between check and count. In memory: one server
//! process holds the counts (a restart forgets them, which only loosens the limit). Behind a
//! reverse proxy the IP is the proxy's; the email half of the key still limits per account.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed logins allowed per window.
pub const MAX_FAILURES: usize = 5;
/// Length of the sliding window.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Above this many tracked keys, stale ones are dropped (bounds memory under a spray attack).
const PRUNE_ABOVE: usize = 10_000;

/// Failure times per key.
#[derive(Debug, Default)]
pub struct LoginLimiter {
    failures: Mutex<HashMap<String, VecDeque<Instant>>>,
}

fn key(ip: &str, email: &str) -> String {
    format!("{ip}|{}", email.to_lowercase())
}

impl LoginLimiter {
    /// Takes a slot for one attempt: `Err(seconds to wait)` when the key has used all of its
    /// slots in the window, `Ok(())` (slot taken) otherwise.
    pub fn attempt(&self, ip: &str, email: &str) -> Result<(), u64> {
        let now = Instant::now();
        let mut map = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() > PRUNE_ABOVE {
            map.retain(|_, t| {
                t.back()
                    .is_some_and(|last| now.duration_since(*last) < WINDOW)
            });
        }
        let times = map.entry(key(ip, email)).or_default();
        while times
            .front()
            .is_some_and(|t| now.duration_since(*t) >= WINDOW)
        {
            times.pop_front();
        }
        if times.len() >= MAX_FAILURES {
            let oldest = times.front().copied().unwrap_or(now);
            let wait = WINDOW.saturating_sub(now.duration_since(oldest));
            return Err(wait.as_secs().max(1));
        }
        times.push_back(now);
        Ok(())
    }

    /// Forgets the attempts of a key after a successful login.
    pub fn succeeded(&self, ip: &str, email: &str) {
        let mut map = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(&key(ip, email));
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
}
