/* base/json.h: the one JSON string writer of weir's reports (job summary,
 * checkpoint listings). */
#ifndef WEIR_JSON_H
#define WEIR_JSON_H

#include <stdio.h>

/* Writes s as a JSON string literal (quotes, escapes for '"', '\\' and
 * control characters). */
void weir_json_string(FILE *f, const char *s);

#endif
