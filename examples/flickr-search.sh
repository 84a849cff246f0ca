#!/bin/sh
# The Flickr search of the MVVM article, as a propbus command: it takes the search text (stdin,
# or PROPBUS_INPUT), waits about two seconds like the article's [RACSignal empty] delay:2.0,
# and prints a made-up result as JSON. FLICKR_SEARCH_DELAY changes the wait (tests use 0.2).
text=${PROPBUS_INPUT-$(cat)}
sleep "${FLICKR_SEARCH_DELAY:-2}"
# JSON-escape backslashes and quotes; the text is one line (a search field).
escaped=$(printf '%s' "$text" | sed 's/\\/\\\\/g; s/"/\\"/g')
printf '{"searchString": "%s", "photos": ["%s at dusk", "%s, close up", "more %s"]}\n' \
  "$escaped" "$escaped" "$escaped" "$escaped"
