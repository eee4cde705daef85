"""A real browser against the S3 endpoint: headless Chromium loads pages
from a local origin (an HTTP server on 127.0.0.1, port 0) that
 1. PUT an object through a presigned URL with a header that needs a CORS
    preflight (the browser sends OPTIONS and goes on only if the bucket's
    rules allow it), then GET it back reading an exposed header;
 2. upload with a presigned POST sent by fetch (FormData, a Blob named
    page.txt: the key's ${filename});
 3. submit an HTML form (a presigned POST with a file input, the key's
    ${filename}; S3 redirects the browser to success_action_redirect);
and boto3 checks what was stored. Run by scripts/s3-clients.sh when
chromium is installed:

    python s3_browser.py ENDPOINT BUCKET"""
import html
import http.server
import json
import queue
import subprocess
import sys
import threading
import urllib.parse

import boto3
from botocore.config import Config

EP, B = sys.argv[1], sys.argv[2]
s3 = boto3.client("s3", endpoint_url=EP, config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
pages, reports = {}, queue.Queue()


class Pages(http.server.BaseHTTPRequestHandler):
    """The pages; GET /report?... is how a page (or S3's redirect after a
    form upload) tells the test what happened."""

    def do_GET(self):
        path, _, query = self.path.partition("?")
        if path == "/report":
            reports.put(urllib.parse.unquote_plus(query))
        body = pages.get(path, "ok").encode()
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the browser went on

    def log_message(self, *a):
        pass


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Pages)
threading.Thread(target=srv.serve_forever, daemon=True).start()
origin = f"http://127.0.0.1:{srv.server_address[1]}"

s3.create_bucket(Bucket=B)
s3.put_bucket_cors(Bucket=B, CORSConfiguration={"CORSRules": [{
    "AllowedOrigins": [origin], "AllowedMethods": ["GET", "PUT", "POST"],
    "AllowedHeaders": ["content-type", "x-amz-meta-*"], "ExposeHeaders": ["ETag", "x-amz-meta-color"], "MaxAgeSeconds": 60}]})
# x-amz-meta-color is signed (S3 refuses unsigned x-amz-* headers); the
# browser still asks first (a preflight): it is not a CORS-safelisted header
put_url = s3.generate_presigned_url("put_object", Params={"Bucket": B, "Key": "fetched.txt", "Metadata": {"color": "green"}}, ExpiresIn=600)
get_url = s3.generate_presigned_url("get_object", Params={"Bucket": B, "Key": "fetched.txt"}, ExpiresIn=600)
post = s3.generate_presigned_post(Bucket=B, Key="posted/${filename}", Fields={"x-amz-meta-via": "fetch"},
                                  Conditions=[["starts-with", "$key", "posted/"], {"x-amz-meta-via": "fetch"}], ExpiresIn=600)
pages["/cors.html"] = """<!doctype html><html><body><pre id="out">running</pre><script>
const out = document.getElementById("out");
(async () => {
  try {
    const put = await fetch(%s, {method: "PUT", body: "from chromium",
      headers: {"Content-Type": "text/plain", "x-amz-meta-color": "green"}});
    if (!put.ok) throw new Error("PUT " + put.status);
    const get = await fetch(%s);
    const text = await get.text();
    const fd = new FormData();
    for (const [k, v] of Object.entries(%s)) fd.append(k, v);
    fd.append("file", new Blob(["posted by fetch"], {type: "text/plain"}), "page.txt");
    const post = await fetch(%s, {method: "POST", body: fd});
    out.textContent = "RESULT " + get.status + " " + get.headers.get("x-amz-meta-color") + " " + text + " POST " + post.status;
  } catch (e) { out.textContent = "RESULT error " + e; }
  await fetch("/report?" + encodeURIComponent(out.textContent));
})();
</script></body></html>""" % (json.dumps(put_url), json.dumps(get_url), json.dumps(post["fields"]), json.dumps(post["url"]))

form = s3.generate_presigned_post(Bucket=B, Key="form/${filename}", Fields={"success_action_redirect": origin + "/report", "x-amz-meta-via": "form"},
                                  Conditions=[["starts-with", "$key", "form/"], {"success_action_redirect": origin + "/report"}, {"x-amz-meta-via": "form"}],
                                  ExpiresIn=600)
inputs = "".join(f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">' for k, v in form["fields"].items())
# A user would pick the file; the page puts one in the file input itself
# (DataTransfer), then submits the form as a click on its button would.
pages["/form.html"] = f"""<!doctype html><html><body>
<form action="{html.escape(form["url"])}" method="post" enctype="multipart/form-data">{inputs}
<input type="file" name="file"><input type="submit" value="Upload"></form>
<script>
const dt = new DataTransfer();
dt.items.add(new File(["posted by an HTML form"], "plain.txt", {{type: "text/plain"}}));
document.querySelector("input[type=file]").files = dt.files;
document.forms[0].submit();
</script></body></html>"""


def chromium(page):
    """Chromium on the page until it reports (at most 90 s); the report."""
    p = subprocess.Popen(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--user-data-dir=/tmp/s3-browser-profile", origin + page], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return reports.get(timeout=90)
    except queue.Empty:
        raise SystemExit(f"{page}: chromium reported nothing in 90 s")
    finally:
        p.terminate()
        p.wait(timeout=30)


got = chromium("/cors.html")
want = "RESULT 200 green from chromium POST 204"
assert got == want, f"cors.html: {got!r}, want {want!r}"
assert s3.get_object(Bucket=B, Key="posted/page.txt")["Body"].read() == b"posted by fetch"
got = chromium("/form.html")  # S3's redirect after the upload: bucket, key, etag
assert "key=form/plain.txt" in got, got
o = s3.get_object(Bucket=B, Key="form/plain.txt")
assert o["Body"].read() == b"posted by an HTML form" and o["Metadata"] == {"via": "form"}, o["Metadata"]
print("s3_browser: chromium's preflighted PUT, GET with an exposed header, fetch POST and HTML form POST: ok")
srv.shutdown()
