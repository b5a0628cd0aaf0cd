package foundrytest

import "testing"

func TestRequestSeed(t *testing.T) {
	t.Parallel()
	parse := func(body string) *createRequest {
		req, aerr := parseCreate([]byte(body))
		if aerr != nil {
			t.Fatal(aerr)
		}
		return req
	}
	a := requestSeed(parse(`{"model":"m","input":"hi","metadata":{"a":"1","b":"2"}}`))
	b := requestSeed(parse(`{"metadata":{"b":"2","a":"1"},"input":"hi","model":"m"}`))
	if a != b {
		t.Fatal("field and key order changed the seed")
	}
	for _, other := range []string{
		`{"model":"m2","input":"hi","metadata":{"a":"1","b":"2"}}`,
		`{"model":"m","input":"ho","metadata":{"a":"1","b":"2"}}`,
		`{"model":"m","input":"hi","metadata":{"a":"1","b":"3"}}`,
		`{"model":"m","input":"hi","instructions":"x","metadata":{"a":"1","b":"2"}}`,
	} {
		if requestSeed(parse(other)) == a {
			t.Errorf("%s has the same seed", other)
		}
	}
	if got := string(appendToken(appendToken(nil, a, 0), a, 1)); got[0] < 'A' || got[0] > 'Z' || got[len(got)-len(word(a, 1))-1] != ' ' {
		t.Fatalf("tokens %q", got)
	}
}
