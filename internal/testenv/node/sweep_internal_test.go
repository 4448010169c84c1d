package node

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// A node whose test process died is stopped and its directory removed by the next StartRabbit's
// sweep; a node whose owner runs is left alone. The "node" here is a sleep named beam (exec -a), so
// that the sweep's command-line check applies without starting RabbitMQ.
func TestTheSweepStopsTheNodesOfDeadTestProcessesOnly(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	orphan := fakeNode(t, dead.Process.Pid)
	owned := fakeNode(t, os.Getpid())

	sweepDeadTestNodes()

	if _, err := os.Stat(orphan.dir); !os.IsNotExist(err) {
		t.Errorf("the dead owner's directory is still there: %v", err)
	}
	select {
	case <-orphan.exited:
	case <-time.After(10 * time.Second):
		t.Error("the dead owner's node still runs")
	}
	if _, err := os.Stat(owned.dir); err != nil {
		t.Errorf("the live owner's directory is gone: %v", err)
	}
	select {
	case <-owned.exited:
		t.Error("the live owner's node was stopped")
	default:
	}
}

type fake struct {
	dir    string
	exited chan struct{}
}

func fakeNode(t *testing.T, owner int) fake {
	t.Helper()
	dir, err := os.MkdirTemp("", testDirPrefix)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "-c", "exec -a beam sleep 60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		_ = os.RemoveAll(dir)
	})
	for name, pid := range map[string]int{"owner.pid": owner, "rabbitmq.pid": cmd.Process.Pid} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The sleep names itself beam once bash has exec'd it.
	deadline := time.Now().Add(10 * time.Second)
	for !CmdlineHas(cmd.Process.Pid, "beam") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return fake{dir: dir, exited: exited}
}
