package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/mixtune/mixtune/report/dashboard"
)

// serveHelp follows the flags in `mixtune serve --help`.
const serveHelp = `
Serves a read-only dashboard of the runs under DIR (default: runs): their
status, loss with validation loss, learning rate, loss scale, gradient
norm and tokens/s overlaid for the runs selected, updating every 2 s while
they train, each run's resolved recipe, and a diff of two recipes. It
listens on 127.0.0.1 (this machine only) unless --addr says otherwise, and
stops on Ctrl-C.
`

func cmdServe(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("serve", "serve [--addr HOST:PORT] [DIR]", stderr)
	explain(fs, stderr, serveHelp)
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on (a host other than 127.0.0.1 or localhost lets other machines read the runs)")
	if err := fs.Parse(args); err != nil {
		return parseErr(err)
	}
	if fs.NArg() > 1 {
		return usageError{fmt.Sprintf("serve takes one runs directory, got %d", fs.NArg())}
	}
	dir := "runs"
	if fs.NArg() == 1 {
		dir = fs.Arg(0)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return usageError{fmt.Sprintf("%s is not a directory of runs", dir)}
	}
	if _, _, err := net.SplitHostPort(*addr); err != nil {
		return usageError{fmt.Sprintf("--addr %q: %v", *addr, err)}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	defer ln.Close()
	tcp, _ := ln.Addr().(*net.TCPAddr)
	srv, err := dashboard.New(dir, dashboard.Options{LocalOnly: tcp != nil && tcp.IP.IsLoopback()})
	if err != nil {
		return err
	}
	defer srv.Close()
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "serving %s at http://%s/ (Ctrl-C stops)\n", dir, ln.Addr())
	ctx, stop := interruptible(io.Discard)
	defer stop()
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		hs.Shutdown(shut)
	}()
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
