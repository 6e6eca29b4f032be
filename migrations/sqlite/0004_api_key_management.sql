-- API key management (`/v1/api-keys`). Append-only: never edit this file once applied;
-- add a new migration instead.

-- Who created a key through the API: the actor label of the caller (`key:<id>`, `local`).
-- NULL for a key made outside the API, such as the owner key of `baton admin create-tenant`.
-- (`last_used_at`, from 0001, is now written too: at most once a minute per key.)
ALTER TABLE api_keys ADD COLUMN created_by TEXT;
