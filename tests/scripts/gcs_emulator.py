"""A local GCS for the tests: gcp-storage-emulator, in memory, on a free loopback port, one bucket.

python tests/scripts/gcs_emulator.py BUCKET  ->  prints the port on its first line, serves until killed.
Two gaps of the emulator against GCS are filled here:
- a media download carries the object's generation in `x-goog-generation` on GCS; tensorstore (Orbax's
  checkpoints) reads it to make its next write of that object conditional, and refuses to write without it
  ("Malformed StorageGeneration");
- its HTTP server handles one request at a time: a longer listen queue keeps tensorstore's parallel connections
  from being refused; a connection idle for 10 s is dropped (a client stopped mid-request, as test_buckets stops
  one with SIGSTOP, would otherwise block every other client; a resumed one retries), and a client that drops a
  connection is not worth a traceback on stderr.
"""
import http.server
import sys
import threading

from gcp_storage_emulator import server
from gcp_storage_emulator.handlers import objects

http.server.HTTPServer.request_queue_size = 128
http.server.BaseHTTPRequestHandler.timeout = 10
http.server.HTTPServer.handle_error = lambda self, request, client_address: None
_download = objects.download


def download(request, response, storage, *args, **kwargs):
  try:
    obj = storage.get_file_obj(request.params["bucket_name"], request.params["object_id"])
    response["x-goog-generation"] = str(obj["generation"])
    response["x-goog-metageneration"] = str(obj.get("metageneration", "1"))
  except Exception:  # noqa: BLE001: a missing object: the original handler answers 404
    pass
  return _download(request, response, storage, *args, **kwargs)


objects.download = download  # objects.get(alt=media) looks it up at call time
for _, handlers in server.HANDLERS:
  for method, fn in list(handlers.items()):
    if fn is _download:
      handlers[method] = download


def main():
  srv = server.create_server("127.0.0.1", 0, in_memory=True, default_bucket=sys.argv[1])
  srv.start()
  print(srv._api._httpd.server_address[1], flush=True)
  threading.Event().wait()


if __name__ == "__main__":
  main()
