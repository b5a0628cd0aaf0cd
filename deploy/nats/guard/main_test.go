package main

import "testing"

func TestConfigPath(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--config", "/etc/nats/a.conf"}, "/etc/nats/a.conf"},
		{[]string{"-c", "/x.conf", "-js"}, "/x.conf"},
		{[]string{"-js", "--config=/y.conf"}, "/y.conf"},
		{[]string{"-config", "/z.conf"}, "/z.conf"},
		{[]string{"-js", "-sd", "/data"}, ""},
		{[]string{"--version"}, ""},
		{[]string{"--cluster", "nats://x"}, ""},
	} {
		if got := configPath(tc.args); got != tc.want {
			t.Errorf("configPath(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}
