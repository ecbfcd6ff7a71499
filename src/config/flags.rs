//! The flag machinery: one table per subcommand drives its flags, their `HANDNODE_*` env
//! twins, `--help` and the generated flag docs.

use super::*;

/// How a flag takes its value, and where the value goes in the draft `T` being built.
pub(crate) enum Kind<T> {
    /// Present or absent. In env: `1|true|yes|on` or `0|false|no|off`.
    Switch(fn(&mut T)),
    /// One value.
    Text {
        metavar: &'static str,
        set: fn(&mut T, String) -> Result<(), String>,
    },
    /// Repeatable; comma-separated in env.
    List {
        metavar: &'static str,
        set: fn(&mut T, Vec<String>) -> Result<(), String>,
    },
    /// A whole number in `min..=max`.
    Int {
        metavar: &'static str,
        min: u64,
        max: u64,
        set: fn(&mut T, u64),
    },
}

/// One row of a flag table: parsing, env and `--help` all come from it.
pub(crate) struct Flag<T> {
    /// Without the leading `--`.
    pub name: &'static str,
    /// Whether `HANDNODE_<NAME>` sets it too.
    pub env: bool,
    /// As shown in `--help`; empty when there is none.
    pub default: &'static str,
    pub help: &'static str,
    pub kind: Kind<T>,
}

impl<T> Flag<T> {
    /// `HANDNODE_<NAME>` with `-` → `_`.
    pub fn env_name(&self) -> String {
        env_name(self.name)
    }

    fn metavar(&self) -> Option<&'static str> {
        match self.kind {
            Kind::Switch(_) => None,
            Kind::Text { metavar, .. } | Kind::List { metavar, .. } | Kind::Int { metavar, .. } => {
                Some(metavar)
            }
        }
    }

    fn repeatable(&self) -> bool {
        matches!(self.kind, Kind::List { .. })
    }

    /// `--name METAVAR`, as help and the README show it.
    fn usage(&self) -> String {
        match self.metavar() {
            Some(m) if self.repeatable() => format!("--{} {m} (repeatable)", self.name),
            Some(m) => format!("--{} {m}", self.name),
            None => format!("--{}", self.name),
        }
    }
}

/// A flag's old name, still accepted so a unit file written for an older release keeps
/// working: `--OLD` and `HANDNODE_OLD` set the flag `new` names, and the start-up log says to
/// use the new name. Giving both names is an error, as giving a flag twice is. One list
/// for every subcommand's table; help and the generated flag docs say it from here.
pub(crate) struct OldName {
    pub old: &'static str,
    pub new: &'static str,
}

pub(crate) const OLD_NAMES: &[OldName] = &[
    // "job" is a `bash_start` job; this bounds tool calls waiting for the workers.
    OldName {
        old: "job-queue",
        new: "call-queue",
    },
];

impl<T> Flag<T> {
    /// What `--help` and the flag docs say about this flag's old names, if it has any.
    pub(crate) fn old_names_note(&self) -> Option<String> {
        let old: Vec<String> = OLD_NAMES
            .iter()
            .filter(|o| o.new == self.name)
            .map(|o| match self.env {
                true => format!("--{} (env {})", o.old, env_name(o.old)),
                false => format!("--{}", o.old),
            })
            .collect();
        (!old.is_empty()).then(|| {
            format!(
                "deprecated old name {}: still accepted, with a warning at start; giving both names is an error",
                old.join(", ")
            )
        })
    }
}

/// The env vars of [`OLD_NAMES`]: known, not typos.
pub(crate) fn old_env_names() -> impl Iterator<Item = String> {
    OLD_NAMES.iter().map(|o| env_name(o.old))
}

fn env_name(flag: &str) -> String {
    format!(
        "{ENV_PREFIX}{}",
        flag.to_ascii_uppercase().replace('-', "_")
    )
}

/// Values gathered for one flag before conversion, and where they came from, so an error
/// names the flag or env var the operator actually wrote.
struct Raw {
    origin: String,
    from_args: bool,
    values: Vec<String>,
}

fn parse_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// Fill `draft` from env, then argv (a flag beats its env var; for a repeatable flag any
/// occurrence on the command line replaces the env list). Returns the positional arguments;
/// an old flag name used ([`OLD_NAMES`]) is warned about here, in the log.
pub(crate) fn apply_flags<T>(
    tables: &[&[Flag<T>]],
    args: &[String],
    env: &HashMap<String, String>,
    draft: &mut T,
) -> Result<Vec<String>, Error> {
    let (positional, notes) = apply_flags_noting(tables, args, env, draft)?;
    for note in notes {
        log::warn!("{note}");
    }
    Ok(positional)
}

/// [`apply_flags`], returning what to warn about (an old flag name used) with the
/// positional arguments, for `serve` to say in its start-up warnings.
pub(crate) fn apply_flags_noting<T>(
    tables: &[&[Flag<T>]],
    args: &[String],
    env: &HashMap<String, String>,
    draft: &mut T,
) -> Result<(Vec<String>, Vec<String>), Error> {
    let flags = || tables.iter().flat_map(|t| t.iter());
    let mut notes = Vec::new();
    let mut raw: BTreeMap<&'static str, Raw> = BTreeMap::new();

    let set = |var: &str| env.get(var).map(|v| v.trim()).filter(|v| !v.is_empty());
    for flag in flags().filter(|f| f.env) {
        let mut var = flag.env_name();
        let mut value = set(&var);
        for old in OLD_NAMES.iter().filter(|o| o.new == flag.name) {
            let old_var = env_name(old.old);
            let Some(old_value) = set(&old_var) else {
                continue;
            };
            if value.is_some() {
                return Err(Error::Config(format!(
                    "{var} and {old_var} (its old name) are both set; keep {var} only"
                )));
            }
            notes.push(format!(
                "{old_var} is the old name of {var}: set {var} instead (the old name is deprecated)"
            ));
            var = old_var;
            value = Some(old_value);
        }
        let Some(value) = value else {
            continue;
        };
        let values = match flag.kind {
            Kind::Switch(_) => match parse_bool(value) {
                Some(true) => Vec::new(),
                Some(false) => continue,
                None => {
                    return Err(Error::Config(format!(
                        "{var}: expected 1/0, true/false, yes/no or on/off, got '{value}'"
                    )))
                }
            },
            Kind::List { .. } => value
                .split(',')
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(String::from)
                .collect(),
            _ => vec![value.to_string()],
        };
        raw.insert(
            flag.name,
            Raw {
                origin: var,
                from_args: false,
                values,
            },
        );
    }

    let mut positional = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if arg == "--" {
            positional.extend(iter.by_ref().cloned());
            break;
        }
        let Some(body) = arg.strip_prefix("--") else {
            if arg.len() > 1 && arg.starts_with('-') {
                return Err(Error::Config(format!("unknown flag {arg} (see --help)")));
            }
            positional.push(arg.clone());
            continue;
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        // An old name stands for its flag, as long as this subcommand has that flag.
        let known = |n: &str| flags().any(|f| f.name == n);
        let renamed = OLD_NAMES.iter().find(|o| o.old == name && known(o.new));
        let Some(flag) = flags().find(|f| f.name == renamed.map_or(name, |o| o.new)) else {
            return Err(Error::Config(format!("unknown flag --{name} (see --help)")));
        };
        if let Some(o) = renamed {
            notes.push(format!(
                "--{} is the old name of --{}: use --{} instead (the old name is deprecated)",
                o.old, o.new, o.new
            ));
        }
        let value = match (&flag.kind, inline) {
            (Kind::Switch(_), Some(_)) => {
                return Err(Error::Config(format!(
                    "--{name} is a switch and takes no value; leave it out to keep it off"
                )))
            }
            (Kind::Switch(_), None) => None,
            (_, Some(v)) => Some(v),
            (_, None) => match iter.next() {
                Some(v) => Some(v.clone()),
                None => {
                    return Err(Error::Config(format!(
                        "--{name} needs a value ({})",
                        flag.metavar().unwrap_or("VALUE")
                    )))
                }
            },
        };
        match raw.get_mut(flag.name) {
            Some(entry) if entry.from_args => {
                if !flag.repeatable() {
                    let typed = format!("--{name}");
                    let also = match entry.origin != typed {
                        true => format!(" (as {} and {typed})", entry.origin),
                        false => String::new(),
                    };
                    return Err(Error::Config(format!(
                        "--{} given more than once{also}; give it once",
                        flag.name
                    )));
                }
                entry.values.extend(value);
            }
            // First on the command line: whatever env said is replaced.
            _ => {
                raw.insert(
                    flag.name,
                    Raw {
                        origin: format!("--{name}"),
                        from_args: true,
                        values: value.into_iter().collect(),
                    },
                );
            }
        }
    }

    for flag in flags() {
        let Some(Raw { origin, values, .. }) = raw.remove(flag.name) else {
            continue;
        };
        let fail = |msg: String| Error::Config(format!("{origin}: {msg}"));
        match &flag.kind {
            Kind::Switch(set) => set(draft),
            Kind::Text { set, .. } => {
                let value = values.into_iter().next().unwrap_or_default();
                set(draft, value).map_err(fail)?;
            }
            Kind::List { set, .. } => set(draft, values).map_err(fail)?,
            Kind::Int { min, max, set, .. } => {
                let value = values.into_iter().next().unwrap_or_default();
                match value.trim().parse::<u64>() {
                    Ok(n) if (*min..=*max).contains(&n) => set(draft, n),
                    _ => {
                        return Err(fail(format!(
                            "expected a whole number in {min}...{max}, got '{value}'"
                        )))
                    }
                }
            }
        }
    }
    Ok((positional, notes))
}

/// Wrap `text` at `width` columns, every line indented by `indent` spaces.
fn wrap(out: &mut String, text: &str, indent: usize, width: usize) {
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent + line.len() + 1 + word.len() > width {
            let _ = writeln!(out, "{:indent$}{line}", "");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        let _ = writeln!(out, "{:indent$}{line}", "");
    }
}

/// How a help text is written out: with the `{gen:KEY}` placeholders of generated lists
/// filled in (`ops::lists::expand`). `config` sits below the registry, so the printer
/// is handed the expansion instead of calling it.
pub(crate) type Expand = fn(&str) -> std::borrow::Cow<'_, str>;

/// The flag part of `--help` for these tables.
pub(crate) fn render_flags<T>(out: &mut String, tables: &[&[Flag<T>]], expand: Expand) {
    for flag in tables.iter().flat_map(|t| t.iter()) {
        let _ = writeln!(out, "  {}", flag.usage());
        wrap(out, &expand(flag.help), 6, 90);
        let mut notes = Vec::new();
        if flag.env {
            notes.push(format!("env {}", flag.env_name()));
        }
        if !flag.default.is_empty() {
            notes.push(format!("default {}", flag.default));
        }
        notes.extend(flag.old_names_note());
        if !notes.is_empty() {
            wrap(out, &format!("[{}]", notes.join("; ")), 6, 90);
        }
    }
}

/// One Markdown table of these flags: flag, env var, default, meaning.
pub(crate) fn markdown_flags<T>(out: &mut String, tables: &[&[Flag<T>]], expand: Expand) {
    out.push_str("| Flag | Env | Default | Meaning |\n|---|---|---|---|\n");
    let code = |s: &str| {
        if s.is_empty() {
            String::new()
        } else {
            format!("`{}`", s.replace('|', "\\|"))
        }
    };
    for flag in tables.iter().flat_map(|t| t.iter()) {
        let env = if flag.env {
            code(&flag.env_name())
        } else {
            String::new()
        };
        let old_names = match flag.old_names_note() {
            Some(note) => format!(" The {note}."),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            code(&flag.usage()),
            env,
            code(flag.default),
            expand(flag.help).replace('|', "\\|") + &old_names
        );
    }
}
