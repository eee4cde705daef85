package meta

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The meta service's own raft group, for alerts on a member without a
// leader or behind it (deploy/prometheus/alerts.yml). A single meta
// service reports itself the leader of a group of one.
var (
	descRaftLeader   = prometheus.NewDesc("spindle_meta_raft_is_leader", "1 on the member that leads the meta raft group and serves, else 0.", nil, nil)
	descRaftHas      = prometheus.NewDesc("spindle_meta_raft_has_leader", "1 while this member knows a leader of its group, else 0.", nil, nil)
	descRaftTerm     = prometheus.NewDesc("spindle_meta_raft_term", "This member's raft term.", nil, nil)
	descRaftApplied  = prometheus.NewDesc("spindle_meta_raft_applied_index", "The last meta log index this member applied.", nil, nil)
	descRaftCommit   = prometheus.NewDesc("spindle_meta_raft_commit_index", "The last meta log index this member knows committed.", nil, nil)
	descRaftMembers  = prometheus.NewDesc("spindle_meta_raft_members", "Members of the meta raft group in this member's view, by kind (voter, learner).", []string{"kind"}, nil)
	descRaftDown     = prometheus.NewDesc("spindle_meta_raft_members_down", "On the leader: members not heard from within two election timeouts.", nil, nil)
	descRaftRecovery = prometheus.NewDesc("spindle_meta_raft_recovering", "1 while this member catches up after losing its directory (it does not vote), else 0.", nil, nil)
	raftCollectors   = []*prometheus.Desc{descRaftLeader, descRaftHas, descRaftTerm, descRaftApplied, descRaftCommit, descRaftMembers, descRaftDown, descRaftRecovery}
)

// raftCollector reads the gauges from the member's status at scrape time.
type raftCollector struct{ s *Service }

func (c raftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range raftCollectors {
		ch <- d
	}
}

func (c raftCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.MetaStatus()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	b := func(ok bool) float64 {
		if ok {
			return 1
		}
		return 0
	}
	gauge(descRaftLeader, b(st.Role == "leader" && st.Serving))
	gauge(descRaftHas, b(st.LeaderID != 0))
	gauge(descRaftTerm, float64(st.Term))
	gauge(descRaftApplied, float64(st.AppliedIndex))
	gauge(descRaftCommit, float64(st.CommitIndex))
	voters, learners := 0, 0
	for _, m := range st.Members {
		if m.Learner {
			learners++
		} else {
			voters++
		}
	}
	gauge(descRaftMembers, float64(voters), "voter")
	gauge(descRaftMembers, float64(learners), "learner")
	gauge(descRaftDown, float64(len(st.Down)))
	gauge(descRaftRecovery, b(st.Role == "recovering"))
}
