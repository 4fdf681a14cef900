//! Per-user shares of something the daemon holds for its clients (connections, watches, bytes
//! of the code store).
//!
//! Every local user may ask, so each user other than root gets a share, all of them together
//! get a larger one, and the total is bounded: what is left between the non-root share and the
//! total is root's, which no other user can take. [`Shares`] hands out things one at a time
//! behind guards; [`Held`] is the bookkeeping under it, for holders that count amounts (bytes)
//! under a lock of their own.

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Mutex},
};

/// How many of a thing users may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShareLimits {
    /// Most one user other than root may hold.
    pub per_user: usize,
    /// Most all users other than root may hold together.
    pub non_root: usize,
    /// Most everyone may hold, root included.
    pub total: usize,
}

/// Why a share was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The user holds its share already.
    PerUser {
        /// The user.
        uid: u32,
        /// Its share.
        limit: usize,
    },
    /// Users other than root hold their share together.
    NonRoot {
        /// Their share.
        limit: usize,
    },
    /// Everything the daemon serves is held.
    Total {
        /// The limit.
        limit: usize,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::PerUser { uid, limit } => {
                write!(f, "uid {uid} holds {limit}, the most one user may")
            }
            Refusal::NonRoot { limit } => write!(
                f,
                "users other than root hold {limit}, the most they may together"
            ),
            Refusal::Total { limit } => write!(f, "{limit} are held, the most the daemon serves"),
        }
    }
}

/// What users hold, by amount: the accounting behind [`Shares`], for callers that keep it under
/// a lock of their own.
#[derive(Debug, Default)]
pub struct Held {
    by_uid: HashMap<u32, usize>,
    non_root: usize,
    total: usize,
}

impl Held {
    /// Takes `amount` more for `uid` within `limits`, or says why not (taking nothing).
    pub fn take(&mut self, limits: &ShareLimits, uid: u32, amount: usize) -> Result<(), Refusal> {
        if self.total.saturating_add(amount) > limits.total {
            return Err(Refusal::Total {
                limit: limits.total,
            });
        }
        if uid != 0 {
            if self.of(uid).saturating_add(amount) > limits.per_user {
                return Err(Refusal::PerUser {
                    uid,
                    limit: limits.per_user,
                });
            }
            if self.non_root.saturating_add(amount) > limits.non_root {
                return Err(Refusal::NonRoot {
                    limit: limits.non_root,
                });
            }
            self.non_root += amount;
        }
        self.total += amount;
        *self.by_uid.entry(uid).or_default() += amount;
        Ok(())
    }

    /// Gives back `amount` that `uid` took.
    pub fn give_back(&mut self, uid: u32, amount: usize) {
        self.total = self.total.saturating_sub(amount);
        if uid != 0 {
            self.non_root = self.non_root.saturating_sub(amount);
        }
        if let Some(n) = self.by_uid.get_mut(&uid) {
            *n = n.saturating_sub(amount);
            if *n == 0 {
                self.by_uid.remove(&uid);
            }
        }
    }

    /// How much everyone holds.
    pub fn total(&self) -> usize {
        self.total
    }

    /// How much `uid` holds.
    pub fn of(&self, uid: u32) -> usize {
        self.by_uid.get(&uid).copied().unwrap_or(0)
    }
}

/// What users hold now, against [`ShareLimits`].
#[derive(Debug)]
pub struct Shares {
    limits: ShareLimits,
    held: Mutex<Held>,
}

impl Shares {
    /// Nothing held yet.
    pub fn new(limits: ShareLimits) -> Arc<Shares> {
        Arc::new(Shares {
            limits,
            held: Mutex::new(Held::default()),
        })
    }

    /// One more for `uid`, held until the [`Share`] is dropped; or why not.
    pub fn take(self: &Arc<Self>, uid: u32) -> Result<Share, Refusal> {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(&self.limits, uid, 1)?;
        Ok(Share {
            shares: self.clone(),
            uid,
        })
    }

    /// How many everyone holds now.
    pub fn held(&self) -> usize {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).total()
    }

    /// How many `uid` holds now.
    pub fn held_by(&self, uid: u32) -> usize {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).of(uid)
    }
}

/// One thing a user holds; given back when dropped.
#[derive(Debug)]
pub struct Share {
    shares: Arc<Shares>,
    uid: u32,
}

impl Share {
    /// Who holds it.
    pub fn uid(&self) -> u32 {
        self.uid
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.shares
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .give_back(self.uid, 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_get_shares_and_root_keeps_its_room() {
        let shares = Shares::new(ShareLimits {
            per_user: 2,
            non_root: 3,
            total: 5,
        });
        let a: Vec<_> = (0..2).map(|_| shares.take(1000).unwrap()).collect();
        assert_eq!(
            shares.take(1000).unwrap_err(),
            Refusal::PerUser {
                uid: 1000,
                limit: 2
            }
        );
        let b = shares.take(1001).unwrap();
        assert_eq!(
            shares.take(1002).unwrap_err(),
            Refusal::NonRoot { limit: 3 }
        );
        // Root is never held to a user's share, only to the total.
        let root: Vec<_> = (0..2).map(|_| shares.take(0).unwrap()).collect();
        assert_eq!(shares.take(0).unwrap_err(), Refusal::Total { limit: 5 });
        drop(a);
        assert_eq!(shares.held_by(1000), 0);
        shares.take(1002).unwrap();
        drop((b, root));
        assert_eq!(shares.held(), 0);
    }
}
