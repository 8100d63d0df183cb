//! The live web page (`web_addr` in `[host]`): a page, its script and the chart library (uPlot
//! 1.6.32, vendored under `crates/host/web/vendor/` and built into the binary, so the page needs
//! no network), and the host API's read-only requests under `/api` (`GET /api/host`,
//! `/api/vms`, `/api/history`, `/api/events`: the same answers as on the host socket). Nothing
//! on this port changes the host: every other method is refused.

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use memvisor_api::{read_request, write_response_as};

use crate::manager::Shared;

const INDEX: &str = include_str!("../web/index.html");
const APP: &str = include_str!("../web/app.js");
const UPLOT_JS: &str = include_str!("../web/vendor/uplot-1.6.32/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../web/vendor/uplot-1.6.32/uPlot.min.css");

/// Binds `addr` and serves the page on its own thread; returns the address bound (the port
/// the system chose, for port 0).
pub fn serve(addr: SocketAddr, host: Shared) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new()
        .name("web".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut s) = conn else { continue };
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
                let (status, kind, body) = match read_request(&mut s) {
                    Ok(req) => answer(&host, &req.method, &req.path),
                    Err(e) => (400, "text/plain", e.to_string().into_bytes()),
                };
                if write_response_as(&mut s, status, kind, &body).is_err() {
                    tracing::debug!("web: a client went away before its answer");
                }
                let _ = s.flush();
            }
        })?;
    Ok(bound)
}

fn answer(host: &Shared, method: &str, path: &str) -> (u16, &'static str, Vec<u8>) {
    if method != "GET" {
        return (405, "text/plain", b"this page only reads: use GET".to_vec());
    }
    let file = |kind, text: &str| (200, kind, text.as_bytes().to_vec());
    match path {
        "/" | "/index.html" => file("text/html; charset=utf-8", INDEX),
        "/app.js" => file("text/javascript; charset=utf-8", APP),
        "/uplot.js" => file("text/javascript; charset=utf-8", UPLOT_JS),
        "/uplot.css" => file("text/css; charset=utf-8", UPLOT_CSS),
        _ => match path.strip_prefix("/api") {
            Some(api)
                if ["/host", "/vms", "/history", "/events"]
                    .iter()
                    .any(|p| api == *p || api.starts_with(&format!("{p}?"))) =>
            {
                let (status, body) = crate::server::handle(host, "GET", api, &[]);
                (status, "application/json", body.into_bytes())
            }
            _ => (
                404,
                "text/plain",
                format!("no such page {path}").into_bytes(),
            ),
        },
    }
}
