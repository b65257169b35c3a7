%% The state of one copy of a replica group under DottedDB replication: the record the core
%% (hm_dotted) and the modules of its concerns share (hm_dotted_store, hm_dotted_sync,
%% hm_dotted_churn). Internal to the ring layer: nothing outside those modules reads it
%% (hm_dotted:state() is opaque).

%% a version without value: a delete
-define(NULL, null).

-type dot() :: hm_vv:dot().
-type version() :: {v, term()} | ?NULL.
-type obj() :: {#{dot() => version()}, hm_node_clock:clock()}.

-record(d, {id :: hm_dotted:id(),
            peers :: [hm_dotted:id()],                    % the group, this copy included
            nc :: hm_node_clock:clock(),
            st = #{} :: #{term() => obj()},
            dkm = #{} :: #{dot() => term()},
            wm = #{} :: #{hm_dotted:id() => hm_vv:vv()},
            nsk = #{} :: #{term() => true},
            %% retired id => copies to hear from
            retired = #{} :: #{hm_dotted:id() => [hm_dotted:id()]},
            closed = [] :: [hm_dotted:id()],              % retired ids with no dot to come
            %% last clock of every copy
            heard = #{} :: #{hm_dotted:id() => hm_node_clock:clock()},
            ae = node_clock :: node_clock | merkle,
            tree :: hm_merkle:tree() | undefined,
            strip_ms = 1000 :: pos_integer(),
            sync_ms = 1000 :: pos_integer(),
            rand :: rand:state(),
            ready = true :: boolean(),
            waited = 0 :: non_neg_integer(),           % anti-entropy ticks since the ask
            ask_gap = 2 :: pos_integer(),               % ticks before asking again
            refused = [] :: [hm_dotted:id()],           % copies that refused since the ask
            events = false :: boolean()}).

-type effects() :: [hm_dotted:effect()].
