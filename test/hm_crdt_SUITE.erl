%% @doc The CRDT library on three real nodes (OTP `peer'), talking over Erlang distribution.
%%
%% Each node runs one replica process per type x flavor. Clients on every node write
%% concurrently; replicas send their events to the other nodes' replicas. Cases:
%% <ul>
%% <li>`concurrent_writes': every node writes at once; after all events are delivered every
%% node shows the same value, for every type and flavor;</li>
%% <li>`lost_events_repaired': a node's outgoing events are dropped for a while (as if the
%% link had failed); state and delta replicas repair the loss by merging full states, op
%% replicas by resending the dropped events, in reverse order;</li>
%% <li>`stability_on_nodes': op replicas stabilize with the vector every node reports, and
%% no timestamp is left.</li>
%% </ul>
-module(hm_crdt_SUITE).
-include_lib("common_test/include/ct.hrl").
-include_lib("eunit/include/eunit.hrl").

-export([suite/0, all/0, init_per_suite/1, end_per_suite/1]).
-export([concurrent_writes/1, lost_events_repaired/1, stability_on_nodes/1]).
%% run on the peers
-export([replica_loop/3]).

-define(NODES, 3).
-define(OPS_PER_NODE, 60).

% A hung case fails within minutes, not after Common Test's default half hour.
suite() -> [{timetrap, {minutes, 3}}].

all() -> [concurrent_writes, lost_events_repaired, stability_on_nodes].

init_per_suite(Config) ->
    ok = ensure_distributed(),
    %% the library and this suite (replica_loop/3 runs on the peers)
    Dirs = [filename:dirname(code:which(M)) || M <- [hm_crdt, ?MODULE]],
    Paths = lists:append([["-pa", D] || D <- lists:usort(Dirs)]),
    %% peer:start, not start_link: init_per_suite's process exits when it returns
    Peers = [begin
                 {ok, Pid, Node} = peer:start(#{name => peer:random_name(?MODULE),
                                                args => Paths}),
                 {Pid, Node}
             end || _ <- lists:seq(1, ?NODES)],
    [{peers, Peers} | Config].

end_per_suite(Config) ->
    [peer:stop(Pid) || {Pid, _} <- ?config(peers, Config)],
    ok.

ensure_distributed() ->
    case node() of
        nonode@nohost ->
            _ = os:cmd("epmd -daemon"),
            {ok, _} = net_kernel:start([list_to_atom("hm_ct_" ++ os:getpid()), shortnames]),
            ok;
        _ -> ok
    end.

%%% ------------------------------------------------------------- cases

concurrent_writes(Config) ->
    each_type_flavor(Config, fun(Replicas, Type, Flavor) ->
        write_everywhere(Replicas, Type),
        converged(Replicas, Type, Flavor)
    end).

lost_events_repaired(Config) ->
    each_type_flavor(Config, fun(Replicas = [{_, First} | _], Type, Flavor) ->
        call(First, {drop_outgoing, true}),
        write_everywhere(Replicas, Type),
        call(First, {drop_outgoing, false}),
        Dropped = call(First, take_dropped),
        true = Dropped > 0,
        repair(Replicas, Flavor),
        converged(Replicas, Type, Flavor)
    end).

stability_on_nodes(Config) ->
    each_type_flavor(Config, fun(Replicas, Type, op) ->
                                     write_everywhere(Replicas, Type),
                                     _ = converged(Replicas, Type, op),
                                     %% quiescent: every node delivered everything
                                     [V] = lists:usort([call(P, delivered) || {_, P} <- Replicas]),
                                     [ok = call(P, {stable, V}) || {_, P} <- Replicas],
                                     [0] = lists:usort([call(P, metadata) || {_, P} <- Replicas]),
                                     ok;
                                (_, _, _) -> ok
                             end).

%%% ------------------------------------------------------------- helpers

each_type_flavor(Config, Check) ->
    Nodes = [N || {_, N} <- ?config(peers, Config)],
    [begin
         Replicas = start_replicas(Nodes, Type, Flavor),
         try Check(Replicas, Type, Flavor)
         after [exit(P, kill) || {_, P} <- Replicas]
         end
     end || Type <- hm_crdt:types(), Flavor <- hm_crdt:flavors()],
    ok.

start_replicas(Nodes, Type, Flavor) ->
    Ps = [{N, spawn(N, ?MODULE, replica_loop, [Type, Flavor, N])} || N <- Nodes],
    [P ! {peers, [Q || {_, Q} <- Ps, Q =/= P]} || {_, P} <- Ps],
    Ps.

%% Each node's client issues its operations concurrently with the others.
write_everywhere(Replicas, Type) ->
    Self = self(),
    Clients = [spawn_link(fun() ->
                                  rand:seed(exsss, {I, 7, 11}),
                                  [ok = call(P, {mutate, op(Type)}) || _ <- lists:seq(1, ?OPS_PER_NODE)],
                                  Self ! {done, self()}
                          end) || {I, {_, P}} <- lists:zip(lists:seq(1, length(Replicas)), Replicas)],
    [receive {done, C} -> ok after 60000 -> ct:fail(client_timeout) end || C <- Clients],
    ok.

repair(Replicas, Flavor) when Flavor =:= state; Flavor =:= delta ->
    States = [call(P, get) || {_, P} <- Replicas],
    [ok = call(P, {merge, S}) || {_, P} <- Replicas, S <- States];
repair([{_, First} | _], op) ->
    ok = call(First, resend_dropped).

%% Wait until every replica shows the same value with nothing pending.
converged(Replicas, Type, Flavor) ->
    Deadline = erlang:monotonic_time(millisecond) + 30000,
    converged(Replicas, Type, Flavor, Deadline).

converged(Replicas, Type, Flavor, Deadline) ->
    Views = [call(P, view) || {_, P} <- Replicas],
    case lists:usort(Views) of
        [{Value, 0}] -> Value;
        _ ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> ct:fail({not_converged, Type, Flavor, Views});
                false ->
                    %% a round trip to every replica lets in-flight events land
                    [ok = call(P, sync) || {_, P} <- Replicas],
                    converged(Replicas, Type, Flavor, Deadline)
            end
    end.

call(P, Req) ->
    Ref = monitor(process, P),
    P ! {call, self(), Ref, Req},
    receive
        {Ref, Reply} -> demonitor(Ref, [flush]), Reply;
        {'DOWN', Ref, _, _, Why} -> ct:fail({replica_down, Why})
    after 30000 -> ct:fail({call_timeout, Req})
    end.

%% A small domain of operations, so nodes conflict.
op(Type) ->
    E = rand:uniform(6),
    case Type of
        gcounter -> {increment, rand:uniform(3)};
        pncounter -> lists:nth(rand:uniform(2), [{increment, 2}, decrement]);
        awset -> lists:nth(rand:uniform(3), [{add, E}, {remove, E}, {add_all, [E, E + 1]}]);
        rwset -> lists:nth(rand:uniform(3), [{add, E}, {remove, E}, {remove_all, [E, E + 1]}]);
        lwwreg -> {assign, E};
        mvreg -> {assign, E};
        ewflag -> lists:nth(rand:uniform(2), [enable, disable]);
        map -> lists:nth(rand:uniform(3), [{update, E rem 3, gcounter, increment},
                                           {update, E rem 3, awset, {add, E}},
                                           {remove, E rem 3}])
    end.

%%% ------------------------------------------------------------- the replica process

-spec replica_loop(hm_crdt:type(), hm_crdt:flavor(), node()) -> no_return().
replica_loop(Type, Flavor, Node) ->
    Peers = receive {peers, Ps} -> Ps end,
    loop(#{crdt => hm_crdt:new(Type, Flavor), peers => Peers, node => Node,
           drop => false, dropped => []}).

loop(S = #{crdt := C}) ->
    receive
        {event, Ev} ->
            loop(S#{crdt := ok_crdt(hm_crdt:deliver(Ev, C))});
        {call, From, Ref, Req} ->
            {Reply, S1} = handle(Req, S),
            From ! {Ref, Reply},
            loop(S1)
    end.

handle({mutate, Op}, S = #{crdt := C, peers := Peers, node := Node, drop := Drop,
                           dropped := Dropped}) ->
    {ok, C1, Ev} = hm_crdt:mutate(Op, Node, C),
    case Drop of
        true -> {ok, S#{crdt := C1, dropped := [Ev | Dropped]}};
        false -> [P ! {event, Ev} || P <- Peers], {ok, S#{crdt := C1}}
    end;
handle({drop_outgoing, B}, S) -> {ok, S#{drop := B}};
handle(take_dropped, S = #{dropped := D}) -> {length(D), S};
handle(resend_dropped, S = #{dropped := D, peers := Peers}) ->
    %% newest first: the receivers' causal buffers restore the order
    [P ! {event, Ev} || Ev <- D, P <- Peers],
    {ok, S#{dropped := []}};
handle(get, S = #{crdt := C}) -> {C, S};
handle({merge, Other}, S = #{crdt := C}) -> {ok, S#{crdt := ok_crdt(hm_crdt:merge(C, Other))}};
handle(view, S = #{crdt := C}) -> {{hm_crdt:value(C), hm_crdt:pending(C)}, S};
handle(delivered, S = #{crdt := C}) -> {hm_crdt:delivered(C), S};
handle({stable, V}, S = #{crdt := C}) ->
    C1 = hm_crdt:stable(V, C),
    true = hm_crdt:value(C1) =:= hm_crdt:value(C),
    {ok, S#{crdt := C1}};
handle(metadata, S = #{crdt := C}) -> {hm_crdt:metadata(C), S};
handle(sync, S) -> {ok, S}.

ok_crdt({error, Why}) -> exit({crdt_error, Why});
ok_crdt(C) -> C.
