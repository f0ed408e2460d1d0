-- wrk script: absolute-URI requests through a forward proxy; origin /nc/ answers Cache-Control: no-store
-- and every URL is unique (?n=counter) => every request is a miss forwarded to the origin
wrk.headers["Host"] = "@ORIGIN_HOST@:@ORIGIN_PORT@"
local n = 0
request = function()
  n = n + 1
  return wrk.format(nil, "http://@ORIGIN_HOST@:@ORIGIN_PORT@@PATH@?n=@RUNID@-" .. n)
end
