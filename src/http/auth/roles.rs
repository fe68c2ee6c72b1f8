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
    /// Every role, lowest first.
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Operator, Role::Admin];

    /// The lowest role that permits `action` (every higher one does too).
    pub fn lowest_for(action: Action) -> Role {
        Role::ALL
            .into_iter()
            .find(|r| r.allows(action))
            .unwrap_or(Role::Admin)
    }

    /// Its name, as in `http.auth.roles.<name>`.
    pub fn name(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

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
    /// The groups that give `role`.
    pub fn groups(&self, role: Role) -> &[String] {
        match role {
            Role::Viewer => &self.viewer,
            Role::Operator => &self.operator,
            Role::Admin => &self.admin,
        }
    }

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

    /// Pages that cannot offer an action say which role it needs: the lowest that has it.
    #[test]
    fn each_action_names_the_lowest_role_allowed_it() {
        assert_eq!(Role::lowest_for(Action::Read), Role::Viewer);
        for action in [
            Action::Rebalance,
            Action::RemoveInstance,
            Action::Uncordon,
            Action::CancelOperation,
        ] {
            assert_eq!(Role::lowest_for(action), Role::Operator, "{action:?}");
        }
        let r = RoleGroups::default();
        assert_eq!(r.groups(Role::Operator), ["leasehold:operators"]);
        assert_eq!(
            r.groups(Role::Admin),
            ["leasehold:admins", "system:masters"]
        );
        assert_eq!(Role::ALL.map(Role::name), ["viewer", "operator", "admin"]);
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
