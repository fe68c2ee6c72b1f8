//! The dashboard's static files, compiled in from `static/`. Each answer carries a strong
//! `ETag` (the SHA-256 of the content) and `Cache-Control: no-cache`, so browsers revalidate
//! cheaply (304) and never run a stale script after an upgrade.

use std::sync::OnceLock;

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::http::error::ApiError;

/// Name, content type, bytes.
const FILES: &[(&str, &str, &[u8])] = &[
    (
        "app.css",
        "text/css; charset=utf-8",
        include_bytes!("../../../static/app.css"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../../static/app.js"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_bytes!("../../../static/favicon.svg"),
    ),
];

fn etags() -> &'static [String] {
    static ETAGS: OnceLock<Vec<String>> = OnceLock::new();
    ETAGS.get_or_init(|| {
        FILES
            .iter()
            .map(|(_, _, bytes)| {
                let d = ring::digest::digest(&ring::digest::SHA256, bytes);
                let hex: String = d.as_ref()[..16]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                format!("\"{hex}\"")
            })
            .collect()
    })
}

/// `GET /static/{file}`.
pub async fn serve(Path(file): Path<String>, headers: HeaderMap) -> Response {
    let Some(i) = FILES.iter().position(|(name, _, _)| *name == file) else {
        return ApiError::NotFound(format!("no static file {file:?}")).into_response();
    };
    let (_, mime, bytes) = FILES[i];
    let etag = &etags()[i];
    let mut res = if headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes())
    {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, mime)], bytes).into_response()
    };
    let h = res.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    res
}
