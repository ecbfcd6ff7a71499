//! STUB (replaced by the `display` branch): desktop notifications.
pub fn desktop(summary: &str, body: &str) {
    log::info!("notify: {summary}: {body}");
}
