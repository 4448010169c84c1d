package httpproblem

import (
	"bytes"
	"fmt"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"

	"github.com/labstack/echo/v4"

	"idemshop/internal/platform/problem"
)

// ReadForm reads the fields of a browser form post (application/x-www-form-urlencoded or
// multipart/form-data) from r's body, and refuses what c.FormValue would let through in silence: a
// body that grows past the limit as it is read (413 body_too_large; one whose Content-Length is over it
// never reaches the route) or is cut short (400 body_unreadable, ReadBody), and a body that is not valid
// form encoding (400 malformed_body). FormValue dropped the parse error and took what it had read: a
// token cut off by the limit read as form_token_invalid, and a body with a broken %-escape after the
// fields went through and bought a coupon.
//
// The fields come from the body only, never the URL's query: a token there reaches the logs, and a
// query field beside a body field would make "which one counts" depend on the reader. A field sent
// twice is left for the caller to refuse (every value is kept, in order).
func ReadForm(r *http.Request) (url.Values, error) {
	body, err := ReadBody(r.Body)
	if err != nil {
		return nil, fmt.Errorf("read form body: %w", err)
	}
	// The body is in memory and under the limit now, so what fails a parser below is the encoding alone.
	// (Request.ParseMultipartForm would parse the query too, and fail a good body for a bad query.)
	var form url.Values
	if mt, params, _ := mime.ParseMediaType(r.Header.Get(echo.HeaderContentType)); mt == echo.MIMEMultipartForm {
		var mf *multipart.Form
		if mf, err = multipart.NewReader(bytes.NewReader(body), params["boundary"]).ReadForm(int64(len(body)) + 1); err == nil {
			form = mf.Value
			// A part with a file name is a file, not a value: ReadForm keeps it apart, so that a field
			// sent once as a value and once as a file would pass as sent once. Such a part counts.
			for name, files := range mf.File {
				for range files {
					form[name] = append(form[name], "")
				}
			}
			_ = mf.RemoveAll() // a file part is held in memory (the body is), so there is nothing on disk
		}
	} else {
		form, err = url.ParseQuery(string(body))
	}
	if err != nil {
		return nil, problem.ErrMalformedBody.WithDetail("the form body is not valid form encoding").Wrap(err)
	}
	return form, nil
}
