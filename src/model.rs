//! The shared vocabulary of Leasehold: the closed sets of words (causes, lifecycle events,
//! operation and move states) that the index, the engine, the history store and the HTTP API
//! all speak. Plain data only: no I/O, no Kubernetes types, no dependency on any other module.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Declares a closed string enum: serde uses the same snake_case words as `as_str`, `Display`
/// and `FromStr`, so what is stored in the database, sent over HTTP and written in Lease
/// annotations is one spelling.
macro_rules! words {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $word:tt,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $word)] $variant,)+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The one spelling of this value.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $word,)+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownWord;
            fn from_str(s: &str) -> Result<Self, UnknownWord> {
                match s {
                    $($word => Ok($name::$variant),)+
                    _ => Err(UnknownWord { kind: stringify!($name), word: s.to_owned() }),
                }
            }
        }
    };
}

/// A word that is not one of an enum's spellings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{word:?} is not a valid {kind}")]
pub struct UnknownWord {
    /// The enum's name.
    pub kind: &'static str,
    /// What was given.
    pub word: String,
}

words! {
    /// How an overlap hand-off went (docs/protocol.md, "Overlap hand-off"): the next owner's
    /// app was proven to work on the target before the old owner's stopped (`proven`), or not
    /// within the bound, so the old owner stopped first (`unproven`).
    Overlap {
        Proven = "proven",
        Unproven = "unproven",
    }
}

words! {
    /// Why a target changed hands.
    Cause {
        /// The target's first owner.
        Initial = "initial",
        /// A rebalance operation moved it.
        Rebalance = "rebalance",
        /// Its owner stopped renewing, died or vanished: it was taken over once the owner's
        /// hold expired.
        Failover = "failover",
        /// Its owner, still live, was stopping on purpose (its pod terminating, or its member
        /// Lease saying it is leaving): a graceful hand-over, no expiry waited
        /// out.
        Handoff = "handoff",
        /// A remove-instance operation drained it off its owner.
        Removal = "removal",
        /// Someone asked for this one move.
        Manual = "manual",
        /// The holder changed without Leasehold asking (another writer, or a member acting on
        /// its own).
        External = "external",
    }
}

words! {
    /// What happened to a member instance.
    InstanceEventKind {
        /// A pod matching the cluster's selector appeared.
        Joined = "joined",
        /// It became ready.
        Ready = "ready",
        /// It stopped being ready.
        NotReady = "not_ready",
        /// Its pod went away.
        Left = "left",
        /// It was excluded from placement.
        Cordoned = "cordoned",
        /// It was allowed to receive targets again.
        Uncordoned = "uncordoned",
        /// A remove-instance operation finished with it.
        Removed = "removed",
        /// It became the cluster's elected leader.
        LeaderGained = "leader_gained",
        /// It stopped being the leader.
        LeaderLost = "leader_lost",
        /// It reported it was paused past the end of its hold (the detail says
        /// how late, and how many targets).
        Overrun = "overrun",
    }
}

words! {
    /// What an operation does.
    OperationKind {
        /// Even out load across the cluster's members.
        Rebalance = "rebalance",
        /// Cordon, drain and remove one instance.
        RemoveInstance = "remove_instance",
    }
}

words! {
    /// Where an operation is in its life.
    OperationState {
        /// Planned by policy (`on_join: propose`), waiting for someone to run it.
        Proposed = "proposed",
        /// Accepted, not yet started.
        Pending = "pending",
        /// Moves are being executed.
        Running = "running",
        /// Every move is done.
        Succeeded = "succeeded",
        /// It stopped with an error.
        Failed = "failed",
        /// Someone stopped it.
        Cancelled = "cancelled",
    }
}

impl OperationState {
    /// No more work will happen for an operation in this state.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }
}

words! {
    /// Where one move of an operation is.
    MoveState {
        /// Not started.
        Pending = "pending",
        /// The desired owner has been written; waiting for the new owner to hold the lease.
        InProgress = "in_progress",
        /// The new owner holds the lease.
        Done = "done",
        /// Retries ran out (the reason is stored with it).
        Failed = "failed",
        /// The operation was cancelled before this move started.
        Cancelled = "cancelled",
    }
}

impl MoveState {
    /// No more work will happen for a move in this state.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Done | Self::Failed | Self::Cancelled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_through_every_spelling() {
        for c in Cause::ALL {
            assert_eq!(c.as_str().parse::<Cause>().unwrap(), *c);
            assert_eq!(
                serde_json::to_string(c).unwrap(),
                format!("\"{}\"", c.as_str())
            );
        }
        for k in InstanceEventKind::ALL {
            assert_eq!(k.to_string().parse::<InstanceEventKind>().unwrap(), *k);
        }
        let e = "moved".parse::<MoveState>().unwrap_err();
        assert_eq!(e.to_string(), "\"moved\" is not a valid MoveState");
    }

    #[test]
    fn final_states() {
        assert!(OperationState::Cancelled.is_final());
        assert!(!OperationState::Proposed.is_final());
        assert!(MoveState::Failed.is_final());
        assert!(!MoveState::InProgress.is_final());
    }
}
