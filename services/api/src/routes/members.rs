//! `/v1/members`: the tenant's users and their roles (admins; owner memberships need an
//! owner). Users join by accepting an invitation (`crate::routes::invitations`); the
//! tenant's last owner can be neither removed nor demoted.

use super::{MemberPage, parse_cursor};
use crate::auth::Caller;
use crate::error::{ApiResult, Problem};
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::routes::agents::ListQuery;
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use baton_core::members::MemberRole;
use baton_core::model::Member;
use uuid::Uuid;

/// List the tenant's members in email order (admin); the cursor is the last email shown.
#[utoipa::path(get, path = "/v1/members", operation_id = "listMembers", tag = "members", params(ListQuery),
    responses((status = 200, body = MemberPage), (status = "4XX", body = Problem)))]
pub async fn list(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<axum::Json<MemberPage>> {
    let after = parse_cursor::<String>(q.cursor.as_deref())?;
    Ok(axum::Json(
        st.members.list(&p, after.as_deref(), q.limit).await?.into(),
    ))
}

/// Change a member's role (admin; a change from or to `owner` needs an owner). Demoting
/// the last owner answers `409 wrong_state`.
#[utoipa::path(put, path = "/v1/members/{user_id}", operation_id = "setMemberRole", tag = "members", request_body = MemberRole,
    params(("user_id" = Uuid, Path, description = "The member's user id")),
    responses((status = 200, body = Member), (status = "4XX", body = Problem)))]
pub async fn set_role(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(user): ApiPath<Uuid>,
    ApiJson(body): ApiJson<MemberRole>,
) -> ApiResult<axum::Json<Member>> {
    Ok(axum::Json(st.members.set_role(&p, user, body.role).await?))
}

/// Remove a member from the tenant (admin; an owner needs an owner). Removing the last
/// owner answers `409 wrong_state`. The user's sessions stay, without this tenant.
#[utoipa::path(delete, path = "/v1/members/{user_id}", operation_id = "removeMember", tag = "members",
    params(("user_id" = Uuid, Path, description = "The member's user id")),
    responses((status = 204), (status = "4XX", body = Problem)))]
pub async fn remove(
    State(st): State<AppState>,
    Caller(p): Caller,
    ApiPath(user): ApiPath<Uuid>,
) -> ApiResult<StatusCode> {
    st.members.remove(&p, user).await?;
    Ok(StatusCode::NO_CONTENT)
}
