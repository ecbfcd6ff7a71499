//! What a throwaway browser's answer names in its own directory, brought into the answer
//! (contract §25). Playwright MCP saves each action's page snapshot as a `.yml` file and each
//! screenshot as a `.png`/`.jpeg` file under its output directory, and answers with a link to
//! it (`- [Snapshot](output/page-….yml)`), a path relative to its working directory, the
//! browser's own directory: a place a `browser` grant has no tool to read. Each such link is
//! replaced by what it points at: a snapshot inline in a `yaml` block (as `browser_snapshot`
//! answers), a screenshot as an MCP image block (unless the answer carries one already), any
//! other text file inline; every other mention of the path goes.
//!
//! Confined and bounded: a linked file is read only when it resolves (links followed) to a
//! regular file beneath the browser's own directory, opened without following a last link,
//! and only while the answer stays within the outbound cap; anything else is named by its
//! title with the reason it is not shown, never by its path.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::{json, Map, Value};

/// What stands where a path to an attached file was.
const ATTACHED: &str = "(attached)";

/// What a linked file becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Image(&'static str),
    Text(&'static str),
}

fn kind_of(path: &str) -> Option<Kind> {
    let ext = path.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match ext.as_str() {
        "png" => Kind::Image("image/png"),
        "jpg" | "jpeg" => Kind::Image("image/jpeg"),
        "yml" | "yaml" => Kind::Text("yaml"),
        "md" | "txt" | "log" => Kind::Text(""),
        "json" => Kind::Text("json"),
        _ => return None,
    })
}

/// Whether `bytes` start as the image type says (a PNG or a JPEG), so nothing else is ever
/// sent under an image's type.
fn is_image(bytes: &[u8], mime: &str) -> bool {
    match mime {
        "image/png" => bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "image/jpeg" => bytes.starts_with(&[0xff, 0xd8, 0xff]),
        _ => false,
    }
}

/// One `- [title](path)` line of a text block.
fn link(line: &str) -> Option<(&str, &str)> {
    let rest = line.strip_prefix("- [")?;
    let (title, rest) = rest.split_once("](")?;
    let path = rest.strip_suffix(')')?;
    let file = !path.is_empty() && !path.contains(char::is_whitespace) && !path.contains("://");
    file.then_some((title, path))
}

/// `path` (relative to `dir`, or absolute) read whole if it is a regular file beneath `dir`
/// of at most `max` bytes; else why not.
fn read_beneath(dir: &Path, path: &str, max: usize) -> Result<Vec<u8>, String> {
    let full: PathBuf = dir.join(path);
    let root = dir
        .canonicalize()
        .map_err(|e| format!("the browser's directory is gone: {e}"))?;
    let real = full
        .canonicalize()
        .map_err(|_| "the browser did not leave the file".to_string())?;
    if !real.starts_with(&root) {
        return Err("it is not in the browser's own directory".into());
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&real)
        .map_err(|e| format!("cannot open it: {e}"))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot read it: {e}"))?;
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    if meta.len() > max as u64 {
        return Err(format!(
            "{} bytes, more than this answer can carry ({max} left)",
            meta.len()
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if bytes.len() > max {
        return Err(format!("it grew past {max} bytes while read"));
    }
    Ok(bytes)
}

/// Bring every file `result` links in the browser's directory `dir` into `result`, keeping
/// what is added within `budget` bytes (the room left under the outbound cap).
pub(super) fn inline_files(result: &mut Map<String, Value>, dir: &Path, budget: usize) {
    let Some(Value::Array(content)) = result.get_mut("content") else {
        return;
    };
    let mut has_image = content
        .iter()
        .any(|b| b.get("type").and_then(Value::as_str) == Some("image"));
    let mut left = budget;
    let mut images = Vec::new();
    let mut paths: Vec<String> = Vec::new();
    for block in content.iter_mut() {
        if block.get("type").and_then(Value::as_str) != Some("text") {
            continue;
        }
        let Some(Value::String(text)) = block.get_mut("text") else {
            continue;
        };
        if !text.contains("](") {
            continue;
        }
        let mut out = String::with_capacity(text.len());
        for line in text.split_inclusive('\n') {
            let bare = line.trim_end_matches('\n');
            let Some((title, path)) = link(bare) else {
                out.push_str(line);
                continue;
            };
            let Some(kind) = kind_of(path) else {
                out.push_str(line);
                continue;
            };
            paths.push(path.to_string());
            let newline = if line.ends_with('\n') { "\n" } else { "" };
            let replaced = match kind {
                Kind::Image(_) if has_image => format!("- {title}: attached as an image"),
                Kind::Image(mime) => {
                    // Base64 takes 4 bytes for every 3.
                    match read_beneath(dir, path, left / 4 * 3) {
                        Ok(bytes) if is_image(&bytes, mime) => {
                            let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
                            left = left.saturating_sub(data.len() + 64);
                            images.push(json!({"type": "image", "data": data, "mimeType": mime}));
                            has_image = true;
                            format!("- {title}: attached as an image")
                        }
                        Ok(_) => format!("- {title}: not shown (it is not a {mime} file)"),
                        Err(why) => format!("- {title}: not shown ({why})"),
                    }
                }
                Kind::Text(fence) => match read_beneath(dir, path, left) {
                    Ok(bytes) => {
                        let body = String::from_utf8_lossy(&bytes);
                        left = left.saturating_sub(body.len() + 16);
                        format!("```{fence}\n{}\n```", body.trim_end_matches('\n'))
                    }
                    Err(why) => format!("- {title}: not shown ({why})"),
                },
            };
            out.push_str(&replaced);
            out.push_str(newline);
        }
        *text = out;
    }
    if paths.is_empty() {
        return;
    }
    // The generated code and comments name the same files ("save it as output/…png").
    for block in content.iter_mut() {
        if let Some(Value::String(text)) = block.get_mut("text") {
            for path in &paths {
                if text.contains(path.as_str()) {
                    *text = text.replace(path.as_str(), ATTACHED);
                }
            }
        }
    }
    content.extend(images);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::testutil::TempDir;

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR-rest";

    fn answer(text: &str) -> Map<String, Value> {
        json!({"content": [{"type": "text", "text": text}]})
            .as_object()
            .unwrap()
            .clone()
    }

    fn text(r: &Map<String, Value>) -> &str {
        r["content"][0]["text"].as_str().unwrap()
    }

    fn browser_dir() -> TempDir {
        let dir = TempDir::new("inline");
        std::fs::create_dir(dir.path("output")).unwrap();
        dir
    }

    #[test]
    fn a_navigate_snapshot_link_becomes_the_snapshot() {
        let dir = browser_dir();
        let yml = "- heading \"Hello\" [level=1] [ref=e2]\n";
        std::fs::write(dir.path("output/page-1.yml"), yml).unwrap();
        let mut r = answer(
            "### Ran Playwright code\n```js\nawait page.goto('x');\n```\n### Snapshot\n\
             - [Snapshot](output/page-1.yml)",
        );
        inline_files(&mut r, dir.0.as_path(), 1 << 20);
        assert_eq!(
            text(&r),
            "### Ran Playwright code\n```js\nawait page.goto('x');\n```\n### Snapshot\n\
             ```yaml\n- heading \"Hello\" [level=1] [ref=e2]\n```"
        );
    }

    #[test]
    fn a_screenshot_link_becomes_an_image_and_its_path_goes_everywhere() {
        let dir = browser_dir();
        std::fs::write(dir.path("output/page-2.png"), PNG).unwrap();
        let mut r = answer(
            "### Result\n- [Screenshot of viewport](output/page-2.png)\n### Ran Playwright \
             code\n```js\n// Screenshot viewport and save it as output/page-2.png\n\
             await page.screenshot({ path: 'output/page-2.png' });\n```",
        );
        inline_files(&mut r, dir.0.as_path(), 1 << 20);
        assert!(!text(&r).contains("output/"), "{}", text(&r));
        assert!(text(&r).contains("- Screenshot of viewport: attached as an image"));
        let image = &r["content"][1];
        assert_eq!(image["type"], "image");
        assert_eq!(image["mimeType"], "image/png");
        let data = base64::engine::general_purpose::STANDARD
            .decode(image["data"].as_str().unwrap())
            .unwrap();
        assert_eq!(data, PNG);
        // With the image already in the answer, none is added; the path still goes.
        let mut r = answer("### Result\n- [Screenshot of viewport](output/page-2.png)");
        r["content"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "image", "data": "AAAA", "mimeType": "image/png"}));
        inline_files(&mut r, dir.0.as_path(), 1 << 20);
        assert_eq!(r["content"].as_array().unwrap().len(), 2);
        assert!(!text(&r).contains("output/"), "{}", text(&r));
    }

    #[test]
    fn nothing_outside_the_browser_dir_and_nothing_past_the_budget_is_read() {
        let dir = browser_dir();
        let outside = TempDir::new("inline-outside");
        std::fs::write(outside.path("secret.yml"), "secret: 1\n").unwrap();
        std::os::unix::fs::symlink(outside.path("secret.yml"), dir.path("output/link.yml"))
            .unwrap();
        let abs = outside.path("secret.yml");
        for (path, why) in [
            (
                "output/link.yml",
                "it is not in the browser's own directory",
            ),
            ("../../etc/passwd.txt", "did not leave the file"),
            (
                abs.to_str().unwrap(),
                "it is not in the browser's own directory",
            ),
            ("output/missing.yml", "the browser did not leave the file"),
        ] {
            let mut r = answer(&format!("### Snapshot\n- [Snapshot]({path})"));
            inline_files(&mut r, dir.0.as_path(), 1 << 20);
            let t = text(&r);
            assert!(!t.contains("secret") && !t.contains(path), "{path}: {t}");
            assert!(t.contains("- Snapshot: not shown ("), "{path}: {t}");
            assert!(t.contains(why) || why.contains("did not"), "{path}: {t}");
        }
        // A file of exactly the budget is shown; one byte more is not.
        std::fs::write(dir.path("output/big.yml"), "x".repeat(100)).unwrap();
        let mut r = answer("- [Snapshot](output/big.yml)");
        inline_files(&mut r, dir.0.as_path(), 100);
        assert!(text(&r).starts_with("```yaml\nxxx"), "{}", text(&r));
        let mut r = answer("- [Snapshot](output/big.yml)");
        inline_files(&mut r, dir.0.as_path(), 99);
        assert_eq!(
            text(&r),
            "- Snapshot: not shown (100 bytes, more than this answer can carry (99 left))"
        );
        // Bytes that are not a PNG are never sent as one.
        std::fs::write(dir.path("output/fake.png"), "not an image").unwrap();
        let mut r = answer("- [Screenshot](output/fake.png)");
        inline_files(&mut r, dir.0.as_path(), 1 << 20);
        assert_eq!(
            text(&r),
            "- Screenshot: not shown (it is not a image/png file)"
        );
        assert_eq!(r["content"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn other_links_and_text_are_left_as_they_are() {
        let dir = browser_dir();
        let page = "### Page\n- Page URL: https://example.com/a](b)\n- [Docs](https://example.com)";
        let mut r = answer(page);
        inline_files(&mut r, dir.0.as_path(), 1 << 20);
        assert_eq!(text(&r), page);
    }
}
