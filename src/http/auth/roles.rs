//! Token mode's authorisation: which [`Role`] a caller's groups give it, and what each role may
//! do. Pure and synchronous; it never sees a token. Kubernetes mode does not use it (it asks
//! SubjectAccessReview, see `kubernetes.rs`).

use crate::config::http::RoleGroups;

/// What a request wants to do. In Kubernetes mode each action is a verb on the virtual
/// resource `clusters.leasehold.io` (the mapping is in the module header of `http::auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// See clusters, Leases, operations and history.
    Read,
    /// Start a rebalance of a cluster.
    Rebalance,
    /// Drain and remove an instance.
    RemoveInstance,
    /// Let a cordoned instance take work again.
    Uncordon,
    /// Cancel a running operation.
    CancelOperation,
}

impl Action {
    /// Every action, for matrices and tests.
    pub const ALL: [Action; 5] = [
        Action::Read,
        Action::Rebalance,
        Action::RemoveInstance,
        Action::Uncordon,
        Action::CancelOperation,
    ];

    /// What it is, for people ("… may not remove instances").
    pub fn describe(self) -> &'static str {
        match self {
            Action::Read => "read",
            Action::Rebalance => "rebalance",
            Action::RemoveInstance => "remove instances",
            Action::Uncordon => "uncordon instances",
            Action::CancelOperation => "cancel operations",
        }
    }
}

/// A token-mode role. Ordered: `Viewer < Operator < Admin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// May read.
    Viewer,
    /// May read and run operations.
    Operator,
    /// May do everything. Today that is what an operator may do; it stays distinct so that
    /// admin-only actions (settings, say) can be added without re-labelling users.
    Admin,
}

impl Role {
    /// Whether this role permits `action`.
    pub fn allows(self, action: Action) -> bool {
        match self {
            Role::Admin => true,
            Role::Operator => match action {
                Action::Read
                | Action::Rebalance
                | Action::RemoveInstance
                | Action::Uncordon
                | Action::CancelOperation => true,
            },
            Role::Viewer => action == Action::Read,
        }
    }
}

impl RoleGroups {
    /// The highest role any of `groups` holds; `None` when no group has a role (the caller is
    /// authenticated but may do nothing).
    pub fn role_of(&self, groups: &[String]) -> Option<Role> {
        let holds = |list: &[String]| groups.iter().any(|g| list.contains(g));
        if holds(&self.admin) {
            Some(Role::Admin)
        } else if holds(&self.operator) {
            Some(Role::Operator)
        } else if holds(&self.viewer) {
            Some(Role::Viewer)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(g: &[&str]) -> Vec<String> {
        g.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn highest_role_wins() {
        let r = RoleGroups::default();
        assert_eq!(r.role_of(&groups(&[])), None);
        assert_eq!(r.role_of(&groups(&["other"])), None);
        assert_eq!(
            r.role_of(&groups(&["leasehold:viewers"])),
            Some(Role::Viewer)
        );
        assert_eq!(
            r.role_of(&groups(&["leasehold:viewers", "leasehold:operators"])),
            Some(Role::Operator)
        );
        assert_eq!(
            r.role_of(&groups(&["leasehold:operators", "system:masters"])),
            Some(Role::Admin)
        );
        assert!(Role::Admin > Role::Operator && Role::Operator > Role::Viewer);
    }

    #[test]
    fn permission_matrix() {
        // Columns: Read, Rebalance, RemoveInstance, Uncordon, CancelOperation.
        let table: [(Option<Role>, [bool; 5]); 4] = [
            (None, [false, false, false, false, false]),
            (Some(Role::Viewer), [true, false, false, false, false]),
            (Some(Role::Operator), [true, true, true, true, true]),
            (Some(Role::Admin), [true, true, true, true, true]),
        ];
        for (role, row) in table {
            for (action, allowed) in Action::ALL.into_iter().zip(row) {
                assert_eq!(
                    role.is_some_and(|r| r.allows(action)),
                    allowed,
                    "{role:?} {action:?}"
                );
            }
        }
    }
}
