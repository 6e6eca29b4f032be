//! The command line: `serve`, `migrate`, `config explain`, `config reference`,
//! `admin create-tenant`, `admin create-user`, `encryption-keys` (`cli/encryption_keys.rs`).

use crate::app;
use crate::config::{self, CliOverrides, Config, Sources};
use anyhow::Context;
use baton_core::crypto::tokens;
use baton_core::model::Member;
use baton_core::model::{ApiKey, Tenant};
use baton_core::model::{AuditAction, AuditEntry};
use baton_core::ports::{Clock, SystemClock};
use baton_core::{Role, TenantId};
use clap::{Parser, Subcommand};
use std::path::PathBuf;

mod encryption_keys;

/// What `baton --version` prints: the version and, for a build without optimizations,
/// that it is one (tools that measure Baton, such as `baton-loadtest`, read it).
#[cfg(debug_assertions)]
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (debug build)");
#[cfg(not(debug_assertions))]
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The first argument that makes `baton` the relay of a networked sandbox (started by
/// Baton inside one, never by hand): `baton sandbox-relay <socket> -- <command>`.
pub const SANDBOX_RELAY: &str = "sandbox-relay";

#[derive(Debug, Parser)]
#[command(
    name = "baton",
    version = VERSION,
    about = "Durable control plane for AI agent runs"
)]
pub struct Cli {
    /// Configuration file (default: ./baton.toml when it exists).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the API (migrating the database first unless `database.migrate_on_start` is false).
    Serve {
        #[command(flatten)]
        overrides: CliOverrides,
    },
    /// Apply pending database migrations and exit.
    Migrate {
        #[command(flatten)]
        overrides: CliOverrides,
    },
    /// Inspect the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Administrative tasks.
    #[command(subcommand)]
    Admin(AdminCommand),
    /// Encryption keys: generate one, re-seal secrets and checkpoints under the active key,
    /// see what each key seals, retire one.
    #[command(subcommand, alias = "keys")]
    EncryptionKeys(encryption_keys::KeysCommand),
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print every effective setting, its value (secrets redacted) and the layer it came from.
    Explain {
        #[command(flatten)]
        overrides: CliOverrides,
    },
    /// Print the Markdown table of every configuration key: its default, its environment
    /// variable and its meaning, generated from the configuration types. Reads no
    /// configuration: it shows built-in defaults only.
    Reference {
        /// Instead of printing, replace the table in this Markdown file: the lines between
        /// `<!-- BEGIN GENERATED: baton config reference -->` and `<!-- END GENERATED -->`.
        #[arg(long, value_name = "FILE")]
        update: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Create a tenant and print its id and an owner API key (shown once).
    CreateTenant {
        /// The tenant's unique name.
        name: String,
        #[command(flatten)]
        overrides: CliOverrides,
    },
    /// Create a user and make it a member of an existing tenant: how a tenant gets its first
    /// owner who logs in with a password. The password is the first line of standard input,
    /// or the value of the variable named by `--password-env`; never an argument, which
    /// other users of the machine could read.
    CreateUser {
        /// The user's email (stored in lower case).
        email: String,
        /// The name of the tenant the user joins.
        #[arg(long, value_name = "NAME")]
        tenant: String,
        /// The user's role in the tenant: viewer, member, admin or owner.
        #[arg(long, default_value = "owner", value_parser = parse_role)]
        role: Role,
        /// Read the password from this environment variable instead of standard input.
        #[arg(long, value_name = "VAR")]
        password_env: Option<String>,
        #[command(flatten)]
        overrides: CliOverrides,
    },
}

fn parse_role(s: &str) -> Result<Role, String> {
    Role::parse(s).ok_or_else(|| format!("{s:?} is not one of viewer, member, admin, owner"))
}

fn load(config_path: Option<PathBuf>, overrides: CliOverrides) -> anyhow::Result<Config> {
    let loaded = config::load(Sources::from_process(config_path, overrides))?;
    Ok(loaded.validate()?)
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve { overrides } => serve(load(cli.config, overrides)?).await,
        Command::Migrate { overrides } => {
            // The database is all a migration needs: NATS, auth and keys may be unset.
            let loaded = config::load(Sources::from_process(cli.config, overrides))?;
            let storage = loaded.validate_storage()?;
            crate::telemetry::init(&loaded.raw().validate_log()?);
            let migrated = app::migrate(&storage).await?;
            for m in &migrated.applied {
                println!("applied migration {} ({})", m.version, m.description);
            }
            match migrated.applied.len() {
                0 => println!(
                    "no migrations pending: the database is at version {}",
                    migrated.version
                ),
                n => println!(
                    "{n} migration{} applied: the database is at version {}",
                    if n == 1 { "" } else { "s" },
                    migrated.version
                ),
            }
            Ok(())
        }
        Command::Config(ConfigCommand::Explain { overrides }) => {
            let loaded = config::load(Sources::from_process(cli.config, overrides))?;
            print!("{}", loaded.explain());
            loaded
                .validate()
                .context("the configuration above is not valid")?;
            Ok(())
        }
        Command::Config(ConfigCommand::Reference { update: None }) => {
            print!("{}", config::reference_markdown()?);
            Ok(())
        }
        Command::Config(ConfigCommand::Reference { update: Some(page) }) => {
            if config::update_reference(&page)? {
                println!("updated the configuration reference in {}", page.display());
            } else {
                println!(
                    "the configuration reference in {} is up to date",
                    page.display()
                );
            }
            Ok(())
        }
        Command::EncryptionKeys(command) => encryption_keys::run(cli.config, command).await,
        Command::Admin(AdminCommand::CreateTenant { name, overrides }) => {
            let config = load(cli.config, overrides)?;
            create_tenant(&config, &name).await
        }
        Command::Admin(AdminCommand::CreateUser {
            email,
            tenant,
            role,
            password_env,
            overrides,
        }) => {
            let config = load(cli.config, overrides)?;
            let password = read_password(password_env.as_deref())?;
            create_user(&config, &email, &tenant, role, &password).await
        }
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let traces = crate::telemetry::init_serving(&config.log, &config.replica_name)?;
    let served = serve_until_stopped(&config).await;
    traces.shutdown().await;
    served
}

async fn serve_until_stopped(config: &Config) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(config.http.listen)
        .await
        .with_context(|| format!("binding {}", config.http.listen))?;
    let running = app::start(config, listener).await?;
    println!("baton listening on http://{}", running.addr);
    let token = running.shutdown_token();
    tokio::select! {
        () = shutdown_signal() => {
            tracing::info!("shutting down");
            token.cancel();
        }
        () = token.cancelled() => {}
    }
    let grace = config.http.shutdown_grace;
    match tokio::time::timeout(grace, running.wait()).await {
        Ok(result) => result,
        Err(_) => anyhow::bail!("shutdown took longer than {grace:?}; exiting anyway"),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

async fn create_tenant(config: &Config, name: &str) -> anyhow::Result<()> {
    let name = name.trim();
    anyhow::ensure!(
        !name.is_empty() && name.len() <= 200,
        "the tenant name must be 1 to 200 characters"
    );
    let stores = app::open_stores(&config.storage).await?;
    anyhow::ensure!(
        stores.tenants.find_tenant_by_name(name).await?.is_none(),
        "a tenant named {name:?} exists already"
    );
    let now = SystemClock.now();
    let tenant = Tenant {
        id: TenantId::new(),
        name: name.to_string(),
        created_at: now,
    };
    stores.tenants.create_tenant(&tenant).await?;
    let issued = tokens::issue_token();
    let key = ApiKey {
        id: uuid::Uuid::now_v7(),
        tenant: tenant.id,
        name: "owner key (created by baton admin create-tenant)".into(),
        prefix: issued.prefix.clone(),
        role: Role::Owner,
        created_at: now,
        expires_at: None,
        revoked_at: None,
    };
    let audit = AuditEntry::operator(
        now,
        AuditAction::ApiKeyCreated,
        key.id.to_string(),
        serde_json::json!({"name": key.name, "prefix": tokens::shown_prefix(&key.prefix), "role": key.role}),
    );
    stores
        .api_keys
        .create_api_key(&key, &issued.hash, &audit)
        .await?;
    stores.close().await;
    println!("tenant_id: {}", tenant.id);
    println!("api_key:   {}", issued.token);
    eprintln!("The API key is shown once: store it now.");
    Ok(())
}

/// The new user's password: the variable `env` when named, otherwise the first line of
/// standard input (without its line ending).
fn read_password(env: Option<&str>) -> anyhow::Result<String> {
    if let Some(name) = env {
        return std::env::var(name)
            .with_context(|| format!("reading the password from the variable {name}"));
    }
    use std::io::{BufRead, IsTerminal};
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprint!("Password (shown as typed; pipe it in or use --password-env to hide it): ");
    }
    let mut line = String::new();
    stdin
        .lock()
        .read_line(&mut line)
        .context("reading the password from standard input")?;
    let password = line.strip_suffix('\n').unwrap_or(&line);
    Ok(password.strip_suffix('\r').unwrap_or(password).to_string())
}

async fn create_user(
    config: &Config,
    email: &str,
    tenant: &str,
    role: Role,
    password: &str,
) -> anyhow::Result<()> {
    let stores = app::open_stores(&config.storage).await?;
    let Some(tenant) = stores.tenants.find_tenant_by_name(tenant.trim()).await? else {
        anyhow::bail!("no tenant is named {tenant:?}: create it with `baton admin create-tenant`");
    };
    // Creating a user announces nothing: no bus to tell.
    let announcer = baton_core::auth::Announcer {
        bus: std::sync::Arc::new(baton_bus::InProcessBus::new(1)),
        replica: baton_core::model::OPERATOR.into(),
    };
    let users = app::users(config, &stores, std::sync::Arc::new(SystemClock), announcer)?;
    let user = users.create_user(email, password).await?;
    let member = Member {
        user_id: user.id,
        email: user.email.clone(),
        role,
        created_at: SystemClock.now(),
    };
    let audit = AuditEntry::operator(
        member.created_at,
        AuditAction::MemberAdded,
        member.user_id.to_string(),
        serde_json::json!({"email": member.email, "role": member.role}),
    );
    stores.users.add_member(tenant.id, &member, &audit).await?;
    stores.close().await;
    println!("user_id:   {}", user.id);
    println!("email:     {}", user.email);
    println!("tenant_id: {}", tenant.id);
    println!("role:      {}", role.as_str());
    Ok(())
}
