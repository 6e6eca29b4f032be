//! The command line: `serve`, `migrate`, `config explain`, `config reference`,
//! `admin create-tenant`.

use crate::app;
use crate::config::{self, CliOverrides, Config, Sources};
use anyhow::Context;
use baton_core::model::{ApiKey, Tenant};
use baton_core::ports::{Clock, SystemClock};
use baton_core::{Role, TenantId, keys};
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "baton",
    version,
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
}

fn load(config_path: Option<PathBuf>, overrides: CliOverrides) -> anyhow::Result<Config> {
    let loaded = config::load(Sources::from_process(config_path, overrides))?;
    Ok(loaded.validate()?)
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve { overrides } => serve(load(cli.config, overrides)?).await,
        Command::Migrate { overrides } => {
            let config = load(cli.config, overrides)?;
            crate::telemetry::init(&config.log);
            app::migrate(&config.storage).await?;
            println!("migrations applied");
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
        Command::Admin(AdminCommand::CreateTenant { name, overrides }) => {
            let config = load(cli.config, overrides)?;
            create_tenant(&config, &name).await
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
    let issued = keys::issue_token();
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
    stores.tenants.create_api_key(&key, &issued.hash).await?;
    stores.close().await;
    println!("tenant_id: {}", tenant.id);
    println!("api_key:   {}", issued.token);
    eprintln!("The API key is shown once: store it now.");
    Ok(())
}
