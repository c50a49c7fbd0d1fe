"""``/docs`` (Swagger UI) and ``/redoc``, served with their scripts from the app itself (offline)."""

import logging

from fastapi import FastAPI, Request
from fastapi.responses import Response

__all__ = ["DOCS_ASSETS_PATH", "serve_docs"]

log = logging.getLogger("manowar_memory.server")

#: where the Swagger UI and ReDoc assets are served from (the ``fastapi-offline`` package's files)
DOCS_ASSETS_PATH = "/docs-assets"


def serve_docs(app: FastAPI) -> None:
    """``/docs`` (Swagger UI) and ``/redoc`` with their scripts and styles served by the app from the
    ``fastapi-offline`` package (a ``server`` extra), so the pages work without a network. Without
    that package the pages load them from a CDN, and the app says so in its log."""
    from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html

    try:
        from importlib.resources import files

        assets = files("fastapi_offline") / "static"
        from starlette.staticfiles import StaticFiles

        app.mount(DOCS_ASSETS_PATH, StaticFiles(directory=str(assets)), name="docs-assets")
        local = True
    except ImportError:
        log.warning("fastapi-offline is not installed: /docs and /redoc load their scripts from a CDN "
                    "(pip install \"manowar-memory[server]\" serves them locally)")
        local = False

    def urls(request: Request) -> tuple[str, str]:
        root = request.scope.get("root_path", "").rstrip("/")
        return root, f"{root}{DOCS_ASSETS_PATH}"

    @app.get("/docs", include_in_schema=False)
    async def swagger(request: Request) -> Response:
        root, base = urls(request)
        title, openapi_url, redirect = f"{app.title} - Swagger UI", f"{root}{app.openapi_url}", f"{root}/docs/oauth2-redirect"
        if not local:
            return get_swagger_ui_html(openapi_url=openapi_url, title=title, oauth2_redirect_url=redirect)
        return get_swagger_ui_html(openapi_url=openapi_url, title=title, oauth2_redirect_url=redirect,
                                   swagger_js_url=f"{base}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{base}/swagger-ui.css", swagger_favicon_url=f"{base}/favicon.png")

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    async def swagger_redirect() -> Response:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> Response:
        root, base = urls(request)
        title, openapi_url = f"{app.title} - ReDoc", f"{root}{app.openapi_url}"
        if not local:
            return get_redoc_html(openapi_url=openapi_url, title=title)
        return get_redoc_html(openapi_url=openapi_url, title=title, redoc_js_url=f"{base}/redoc.standalone.js",
                              redoc_favicon_url=f"{base}/favicon.png", with_google_fonts=False)
