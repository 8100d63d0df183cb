//! The live web page (`web_addr` in `[host]`), served by the API crate's TCP server: a page, its script and the chart library (uPlot
//! 1.6.32, vendored under `crates/host/web/vendor/` and built into the binary, so the page needs
//! no network), and the host API's read-only requests under `/api` (`GET /api/host`,
//! `/api/vms`, `/api/history`, `/api/events`: the same answers as on the host socket). Nothing
//! on this port changes the host: every other method is refused.

use std::net::{SocketAddr, TcpListener};

use memvisor_api::server::{refuse, serve_tcp, Reply};
use memvisor_api::HostRequest;

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
    serve_tcp(listener, "web", move |method, path, _body| {
        answer(&host, method, path)
    })?;
    Ok(bound)
}

fn text(status: u16, content_type: &'static str, body: &str) -> Reply {
    Reply {
        status,
        content_type,
        body: body.to_owned(),
        then: None,
    }
}

fn answer(host: &Shared, method: &str, path: &str) -> Reply {
    if method != "GET" {
        return text(405, "text/plain", "this page only reads: use GET");
    }
    match path {
        "/" | "/index.html" => text(200, "text/html; charset=utf-8", INDEX),
        "/app.js" => text(200, "text/javascript; charset=utf-8", APP),
        "/uplot.js" => text(200, "text/javascript; charset=utf-8", UPLOT_JS),
        "/uplot.css" => text(200, "text/css; charset=utf-8", UPLOT_CSS),
        _ => match path
            .strip_prefix("/api")
            .map(|api| HostRequest::parse("GET", api, &[]))
        {
            Some(Ok(request)) if request.is_page_read() => crate::server::handle(host, request),
            // A read with a query that does not parse.
            Some(Err(e)) if e.status == 400 => refuse(&e).into(),
            _ => text(404, "text/plain", &format!("no such page {path}")),
        },
    }
}
