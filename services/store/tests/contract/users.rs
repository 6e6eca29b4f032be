//! Contract: users are unique by email; memberships live within their tenant and list in
//! email order; the last owner of a tenant is neither removed nor demoted, even by two
//! owners demoting each other at once; sessions are found by their hash, revoked once,
//! and a user's expired sessions go at its next login.

use crate::support::*;
use baton_core::Role;
use baton_core::StoreError;
use baton_core::model::{Member, Session, TenantRole, User};
use baton_core::ports::{MemberChange, UserStore};
use baton_events::TenantId;
use chrono::Duration;
use uuid::Uuid;

async fn user<S: UserStore>(s: &S, email: &str) -> User {
    let u = User {
        id: Uuid::now_v7(),
        email: email.into(),
        created_at: now(),
    };
    s.create_user(&u, &format!("$argon2id$hash-of-{email}"))
        .await
        .expect("create user");
    u
}

/// A user with an email of its own.
async fn someone<S: UserStore>(s: &S) -> User {
    user(s, &format!("{}@example.com", Uuid::new_v4().simple())).await
}

async fn join<S: UserStore>(s: &S, tenant: TenantId, u: &User, role: Role) -> Member {
    let m = Member {
        user_id: u.id,
        email: u.email.clone(),
        role,
        created_at: now(),
    };
    s.add_member(tenant, &m, &audited())
        .await
        .expect("add member");
    m
}

async fn role_of<S: UserStore>(s: &S, tenant: TenantId, u: &User) -> Option<Role> {
    s.get_member(tenant, u.id)
        .await
        .expect("get member")
        .map(|m| m.role)
}

pub async fn users_round_trip_and_their_emails_are_unique<S: Store + UserStore>(s: &S) {
    let ada = user(s, "ada@example.com").await;
    let found = s
        .find_user_by_email("ada@example.com")
        .await
        .expect("find")
        .expect("stored");
    assert_eq!(found.user, ada);
    assert_eq!(found.password_hash, "$argon2id$hash-of-ada@example.com");
    assert_eq!(s.get_user(ada.id).await.expect("get"), Some(ada.clone()));
    assert_eq!(s.get_user(Uuid::now_v7()).await.expect("get"), None);
    // Lookups are exact: emails are normalized before they reach the store.
    assert!(
        s.find_user_by_email("Ada@example.com")
            .await
            .expect("find")
            .is_none()
    );

    let twin = User {
        id: Uuid::now_v7(),
        ..ada.clone()
    };
    let dup = s.create_user(&twin, "$argon2id$other").await;
    assert!(matches!(dup, Err(StoreError::Conflict { .. })), "{dup:?}");
}

pub async fn memberships_stay_within_their_tenant<S: Store + UserStore>(s: &S) {
    let (mine, other) = (tenant(s).await, tenant(s).await);
    let u = someone(s).await;
    let m = join(s, mine, &u, Role::Admin).await;
    assert_eq!(
        s.get_member(mine, u.id).await.expect("get"),
        Some(m.clone())
    );

    // The other tenant sees no member and can change none.
    assert_eq!(s.get_member(other, u.id).await.expect("get"), None);
    assert!(
        s.list_members(other, None, 10)
            .await
            .expect("list")
            .is_empty()
    );
    let changed = s
        .change_member_role(other, u.id, Role::Admin, Role::Viewer, &audited())
        .await
        .expect("change");
    assert_eq!(changed, MemberChange::NotFound);
    let removed = s
        .remove_member(other, u.id, Role::Admin, &audited())
        .await
        .expect("remove");
    assert_eq!(removed, MemberChange::NotFound);
    assert_eq!(role_of(s, mine, &u).await, Some(Role::Admin), "untouched");

    // A second membership; the user's tenants list both with their names.
    join(s, other, &u, Role::Viewer).await;
    let mut want = Vec::new();
    for (t, role) in [(mine, Role::Admin), (other, Role::Viewer)] {
        let name = s.get_tenant(t).await.expect("tenant").expect("stored").name;
        want.push(TenantRole {
            tenant_id: t,
            name,
            role,
        });
    }
    want.sort_by_key(|r| r.tenant_id.as_uuid());
    assert_eq!(s.memberships_of(u.id, 10).await.expect("of"), want);
    assert_eq!(s.memberships_of(u.id, 1).await.expect("of"), want[..1]);
    assert!(
        s.memberships_of(Uuid::now_v7(), 10)
            .await
            .expect("of")
            .is_empty()
    );

    // A membership twice is a conflict; one of an unknown tenant or user is not found.
    let again = s.add_member(mine, &m, &audited()).await;
    assert!(
        matches!(again, Err(StoreError::Conflict { .. })),
        "{again:?}"
    );
    let nowhere = s.add_member(TenantId::new(), &m, &audited()).await;
    assert!(matches!(nowhere, Err(StoreError::NotFound)), "{nowhere:?}");
    let nobody = Member {
        user_id: Uuid::now_v7(),
        ..m
    };
    let nobody = s.add_member(mine, &nobody, &audited()).await;
    assert!(matches!(nobody, Err(StoreError::NotFound)), "{nobody:?}");
}

pub async fn members_list_in_email_order_with_a_cursor<S: Store + UserStore>(s: &S) {
    let t = tenant(s).await;
    let tag = Uuid::new_v4().simple().to_string();
    let mut made = Vec::new();
    for local in ["carol", "Bob", "alice", "dave"] {
        let u = user(s, &format!("{local}-{tag}@example.com")).await;
        made.push(join(s, t, &u, Role::Member).await);
    }
    // Byte order: upper case before lower case, on both databases.
    made.sort_by(|a, b| a.email.cmp(&b.email));
    let first = s.list_members(t, None, 3).await.expect("list");
    assert_eq!(first, made[..3]);
    let rest = s
        .list_members(t, Some(&made[2].email), 3)
        .await
        .expect("list");
    assert_eq!(rest, made[3..]);
}

pub async fn the_last_owner_is_neither_removed_nor_demoted<S: Store + UserStore>(s: &S) {
    let t = tenant(s).await;
    let (a, b) = (someone(s).await, someone(s).await);
    join(s, t, &a, Role::Owner).await;
    join(s, t, &b, Role::Admin).await;

    for to in [Role::Admin, Role::Member, Role::Viewer] {
        let r = s
            .change_member_role(t, a.id, Role::Owner, to, &audited())
            .await;
        assert_eq!(r.expect("change"), MemberChange::LastOwner, "{to:?}");
    }
    let r = s
        .remove_member(t, a.id, Role::Owner, &audited())
        .await
        .expect("remove");
    assert_eq!(r, MemberChange::LastOwner);
    // Staying an owner is no demotion.
    let r = s
        .change_member_role(t, a.id, Role::Owner, Role::Owner, &audited())
        .await;
    assert_eq!(r.expect("change"), MemberChange::Done);
    assert_eq!(role_of(s, t, &a).await, Some(Role::Owner));

    // A change decided against a role the member no longer has writes nothing.
    let r = s
        .change_member_role(t, b.id, Role::Member, Role::Viewer, &audited())
        .await;
    assert_eq!(r.expect("change"), MemberChange::Stale);
    let r = s
        .remove_member(t, b.id, Role::Member, &audited())
        .await
        .expect("remove");
    assert_eq!(r, MemberChange::Stale);
    assert_eq!(role_of(s, t, &b).await, Some(Role::Admin));

    // With a second owner, the first may go.
    let r = s
        .change_member_role(t, b.id, Role::Admin, Role::Owner, &audited())
        .await;
    assert_eq!(r.expect("promote"), MemberChange::Done);
    let r = s
        .change_member_role(t, a.id, Role::Owner, Role::Member, &audited())
        .await;
    assert_eq!(r.expect("demote"), MemberChange::Done);
    let r = s
        .remove_member(t, a.id, Role::Member, &audited())
        .await
        .expect("remove");
    assert_eq!(r, MemberChange::Done);
    assert_eq!(role_of(s, t, &a).await, None);
    let r = s
        .remove_member(t, b.id, Role::Owner, &audited())
        .await
        .expect("remove");
    assert_eq!(r, MemberChange::LastOwner, "b is the last owner now");
}

pub async fn two_owners_demoting_each_other_at_once_leave_one<S: Store + UserStore>(s: &S) {
    for round in 0..8 {
        let t = tenant(s).await;
        let (a, b) = (someone(s).await, someone(s).await);
        join(s, t, &a, Role::Owner).await;
        join(s, t, &b, Role::Owner).await;
        let (ea, eb) = (audited(), audited());
        let (ra, rb) = tokio::join!(
            s.change_member_role(t, a.id, Role::Owner, Role::Member, &ea),
            s.remove_member(t, b.id, Role::Owner, &eb),
        );
        let mut outcomes = [ra.expect("demote a"), rb.expect("remove b")];
        outcomes.sort_by_key(|o| format!("{o:?}"));
        assert_eq!(
            outcomes,
            [MemberChange::Done, MemberChange::LastOwner],
            "round {round}"
        );
        let owners = s
            .list_members(t, None, 10)
            .await
            .expect("list")
            .into_iter()
            .filter(|m| m.role == Role::Owner)
            .count();
        assert_eq!(owners, 1, "round {round}");
    }
}

fn session(user: &User, created: chrono::DateTime<chrono::Utc>, lifetime: Duration) -> Session {
    Session {
        id: Uuid::now_v7(),
        user: user.id,
        created_at: created,
        expires_at: created + lifetime,
        revoked_at: None,
    }
}

/// A hash of its own for every session.
fn hash() -> Vec<u8> {
    Uuid::new_v4().as_bytes().repeat(2)
}

pub async fn sessions_are_found_by_hash_and_revoked_once<S: Store + UserStore>(s: &S) {
    let u = someone(s).await;
    let (ses, h) = (session(&u, now(), Duration::hours(1)), hash());
    s.create_session(&ses, &h).await.expect("create");
    assert_eq!(
        s.lookup_session(&h).await.expect("lookup"),
        Some(ses.clone())
    );
    assert_eq!(s.lookup_session(&hash()).await.expect("lookup"), None);

    let at = now();
    assert!(s.revoke_session(ses.id, at).await.expect("revoke"));
    assert!(
        !s.revoke_session(ses.id, at + Duration::minutes(1))
            .await
            .expect("again")
    );
    let found = s.lookup_session(&h).await.expect("lookup").expect("kept");
    assert_eq!(found.revoked_at, Some(at), "the first revocation stays");

    let reused = s
        .create_session(&session(&u, now(), Duration::hours(1)), &h)
        .await;
    assert!(
        matches!(reused, Err(StoreError::Conflict { .. })),
        "{reused:?}"
    );
    let stranger = User {
        id: Uuid::now_v7(),
        ..u.clone()
    };
    let orphan = s
        .create_session(&session(&stranger, now(), Duration::hours(1)), &hash())
        .await;
    assert!(matches!(orphan, Err(StoreError::NotFound)), "{orphan:?}");
}

pub async fn a_login_purges_only_that_users_expired_sessions<S: Store + UserStore>(s: &S) {
    let (u, other) = (someone(s).await, someone(s).await);
    let long_ago = now() - Duration::days(2);
    let (expired, live, theirs) = (hash(), hash(), hash());
    s.create_session(&session(&u, long_ago, Duration::hours(1)), &expired)
        .await
        .expect("create");
    s.create_session(&session(&u, long_ago, Duration::days(30)), &live)
        .await
        .expect("create");
    s.create_session(&session(&other, long_ago, Duration::hours(1)), &theirs)
        .await
        .expect("create");

    s.create_session(&session(&u, now(), Duration::hours(1)), &hash())
        .await
        .expect("log in again");
    assert_eq!(s.lookup_session(&expired).await.expect("lookup"), None);
    assert!(s.lookup_session(&live).await.expect("lookup").is_some());
    assert!(
        s.lookup_session(&theirs).await.expect("lookup").is_some(),
        "another user's sessions wait for that user's login"
    );
}
