//! Finding, reading and creating the admin token: flag, env, systemd credential or file,
//! with the file's mode and size checked.

use super::*;

/// The admin token and where it came from (the source is logged, the value never).
#[derive(Clone, Debug)]
pub struct ResolvedToken {
    pub secret: Secret,
    pub source: String,
}

/// Find the admin token the way both the daemon and the operator CLI do: `token_file`
/// (`--token-file`), env `HANDNODE_TOKEN`, `$CREDENTIALS_DIRECTORY/handnode-token`, then
/// `<config_dir>/token`; the first one present wins. A named file that cannot be read, or
/// any token that is empty after trimming, is a configuration error rather than a reason to
/// look further.
pub fn resolve_token(
    token_file: Option<&Path>,
    env: &HashMap<String, String>,
    config_dir: Option<&Path>,
) -> Result<Option<ResolvedToken>, Error> {
    let from_file = |path: &Path| {
        read_secret_file(path)
            .map(|secret| {
                Some(ResolvedToken {
                    secret,
                    source: path.display().to_string(),
                })
            })
            .map_err(|e| Error::Config(format!("token file {e}")))
    };
    if let Some(path) = token_file {
        return from_file(path);
    }
    if let Some(value) = env
        .get(TOKEN_ENV)
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
    {
        check_secret_chars(value).map_err(|e| Error::Config(format!("{TOKEN_ENV} {e}")))?;
        return Ok(Some(ResolvedToken {
            secret: Secret::new(value),
            source: format!("env {TOKEN_ENV}"),
        }));
    }
    let credential = env
        .get("CREDENTIALS_DIRECTORY")
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(CREDENTIAL_NAME));
    let default = config_dir.map(|d| d.join(TOKEN_FILE_NAME));
    for path in credential.into_iter().chain(default) {
        if path.exists() {
            return from_file(&path);
        }
    }
    Ok(None)
}

/// A secret must fit an `Authorization: Bearer` header unchanged.
fn check_secret_chars(value: &str) -> Result<(), String> {
    if value.chars().all(|c| c.is_ascii_graphic()) {
        Ok(())
    } else {
        Err("must be printable ASCII without spaces".into())
    }
}

/// Read a file (or pipe) holding one secret (admin token, attach secret, pod credential): at most
/// [`SECRET_FILE_MAX_BYTES`], surrounding whitespace trimmed, not empty. The error starts
/// with the path. A file others can read is used but logged, since it should be 0600.
pub fn read_secret_file(path: &Path) -> Result<Secret, String> {
    let shown = path.display();
    let file = std::fs::File::open(path).map_err(|e| format!("{shown}: cannot read it: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("{shown}: cannot read it: {e}"))?;
    // Not only regular files: `--secret-file /dev/stdin` lets a password manager pipe one in.
    if meta.is_dir() {
        return Err(format!("{shown}: is a directory, not a file"));
    }
    let mut bytes = Vec::new();
    file.take(SECRET_FILE_MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{shown}: cannot read it: {e}"))?;
    if bytes.len() as u64 > SECRET_FILE_MAX_BYTES {
        return Err(format!(
            "{shown}: is larger than {SECRET_FILE_MAX_BYTES} bytes; it should hold only the secret"
        ));
    }
    let text = String::from_utf8(bytes).map_err(|_| format!("{shown}: is not UTF-8 text"))?;
    let value = text.trim();
    if value.is_empty() {
        return Err(format!(
            "{shown}: is empty; put the secret in it (or remove the file)"
        ));
    }
    check_secret_chars(value).map_err(|e| format!("{shown}: its content {e}"))?;
    let mode = meta.permissions().mode() & 0o777;
    if meta.is_file() && mode & 0o077 != 0 {
        log::warn!(
            "{shown} has mode {mode:03o}: others on this box can read it; run chmod 600 on it"
        );
    }
    Ok(Secret::new(value))
}

/// Write a fresh random 256-bit token to `path` (0600; missing parent dirs created 0700).
/// Never overwrites: an existing file would have been found by [`resolve_token`].
pub fn create_token_file(path: &Path) -> Result<Secret, Error> {
    let fail = |what: &str, e: std::io::Error| {
        Error::Config(format!(
            "no authentication is configured and {what} {}: {e}; pass --token-file or --config-dir",
            path.display()
        ))
    };
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| fail("cannot create the directory of", e))?;
    }
    let secret = Secret::random().map_err(|e| fail("no randomness to generate", e))?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| fail("cannot create the token file", e))?;
    file.write_all(format!("{}\n", secret.expose()).as_bytes())
        .and_then(|_| file.sync_all())
        .map_err(|e| fail("cannot write the token file", e))?;
    Ok(secret)
}
