//! Per-user shares of something the daemon holds for its clients (connections, watches).
//!
//! Every local user may ask, so each user other than root gets a share, all of them together
//! get a larger one, and the total is bounded: what is left between the non-root share and the
//! total is root's, which no other user can take.

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

#[derive(Debug, Default)]
struct Held {
    by_uid: HashMap<u32, usize>,
    non_root: usize,
    total: usize,
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
        let limits = self.limits;
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if held.total >= limits.total {
            return Err(Refusal::Total {
                limit: limits.total,
            });
        }
        if uid != 0 {
            if held.by_uid.get(&uid).copied().unwrap_or(0) >= limits.per_user {
                return Err(Refusal::PerUser {
                    uid,
                    limit: limits.per_user,
                });
            }
            if held.non_root >= limits.non_root {
                return Err(Refusal::NonRoot {
                    limit: limits.non_root,
                });
            }
            held.non_root += 1;
        }
        held.total += 1;
        *held.by_uid.entry(uid).or_default() += 1;
        Ok(Share {
            shares: self.clone(),
            uid,
        })
    }

    /// How many everyone holds now.
    pub fn held(&self) -> usize {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).total
    }

    /// How many `uid` holds now.
    pub fn held_by(&self, uid: u32) -> usize {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.by_uid.get(&uid).copied().unwrap_or(0)
    }

    fn give_back(&self, uid: u32) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.total -= 1;
        if uid != 0 {
            held.non_root -= 1;
        }
        if let Some(n) = held.by_uid.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                held.by_uid.remove(&uid);
            }
        }
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
        self.shares.give_back(self.uid);
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
