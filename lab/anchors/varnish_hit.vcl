vcl 4.1;
# varnish HIT mode: default caching; origin /c/ sends max-age=3600; force 1h TTL anyway
backend origin { .host = "@ORIGIN_HOST@"; .port = "@ORIGIN_PORT@"; }
sub vcl_backend_response { set beresp.ttl = 1h; }
