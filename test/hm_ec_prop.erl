%% @doc PropEr properties of the two pure protocol cores behind EC tables: the per-key
%% pure op-based set of records (hm_ec_key: `pawset' / `prwset' with the payload-conflict
%% policies) and tagged causal stable broadcast (hm_tcsb), the Hypermnesia paper §4.4–4.8
%% (Algorithm 1, Algorithm 2, causal stability). Both are checked against naive, independent
%% models, never against the modules themselves. Run through EUnit; cases per property:
%% `PROPER_NUMTESTS' (default 300, via hm_crdt_prop:check/1). Set `HM_EC_PROP_STATS=1' to
%% print PropEr's distribution of the generated schedules.
%%
%% <ul>
%% <li>`prop_ec_key(Type, Policy)': 2–4 replicas issue writes of records from a 3-value
%% domain, deletes and delete_objects on ONE key; each event is delivered to each replica in
%% any causal order (own model of causal delivery, with eager acknowledgements); stabilize/3
%% runs at random points with the safe stable vector of the Hypermnesia paper's Algorithm 1
%% (per replica: the minimum over every other replica of what it is known to have delivered
%% when it last sent or acknowledged). After every step a replica's view/3 must equal the
%% declarative spec over the events it has delivered; stabilize/3 must not change the view;
%% at the end every replica shows the same view, equal to the spec over every event, and
%% after quiescence stabilize/3 leaves no timestamp.</li>
%% <li>`prop_tcsb()': 2–4 members `{Node, 1}' broadcast; a network of in-flight messages is
%% delivered in any order, with duplicates, losses and cuts (every in-flight message to or
%% from a member lost), acks at random times, `missing(_, all, _)' after a reconnect,
%% `missing(_, old, _)' with ticks, gc at random times; then a reconnect of everyone, all
%% messages, one round of acks. Checked: exactly-once causal delivery; stable/1 is true
%% causal stability (every member has delivered it) and nothing concurrent with a stable
%% message is ever delivered afterwards; stable/1 never goes back; the log keeps exactly the
%% delivered, not yet collected messages; missing/3 is complete and sound; at the end every
%% member delivered every message, stable/1 is the join of all timestamps and gc/1 empties
%% the log.</li>
%% </ul>
%%
%% The prwset spec is stated as "ops not superseded" rather than "causally maximal ops": a
%% delete_object of one record does not supersede a concurrent-or-earlier delete, so
%% `delete || write(b)', then `delete_object(a)' after both, leaves the key absent (as the
%% implementation does); with "absent iff a causally maximal op is a delete" it would show b.
%%
%% An operation is recorded as its origin prepares it (hm_ec_key:prepare/3): under
%% term_order and lww, a delete_object of the record the origin's spec shows is a delete.
%% The spec decides it from the events the origin delivered, the implementation from its
%% view there; they must agree. Stabilization then keeps only the version the policy shows
%% (checked at quiescence: no metadata is left but under siblings), and replicas that have
%% stabilized and replicas that have not must still show the same thing after any later
%% operation (minimised once in stabilize_then_delete_object_test_).
-module(hm_ec_prop).
-include("hm_prop.hrl").
-include_lib("eunit/include/eunit.hrl").

-export([prop_ec_key/2, prop_tcsb/0, run_ec/5, run_tcsb/3, spec/3]).

check(Prop) -> hm_crdt_prop:check(Prop).


%% With HM_EC_PROP_STATS set, PropEr prints how often each tagged statistic occurred.
stats(Tags, Prop) ->
    case os:getenv("HM_EC_PROP_STATS") of
        V when V =:= false; V =:= "" -> Prop;
        _ -> lists:foldl(fun({Title, Value}, P) ->
                                 collect(with_title(Title), Value, P)
                         end, Prop, lists:reverse(Tags))
    end.

bucket(N) when N =< 0 -> 0;
bucket(N) when N =< 2 -> '1-2';
bucket(N) when N =< 5 -> '3-5';
bucket(N) when N =< 10 -> '6-10';
bucket(N) when N =< 20 -> '11-20';
bucket(_) -> '>20'.

%%% ================================================================ hm_ec_key

-define(VALUES, [a, b, c]).
-define(EC_REPLICAS, {r1, r2, r3, r4}).

rep(I) -> element(I, ?EC_REPLICAS).
rec(V) -> {rec, k, V}.

ec_op() ->
    frequency([{5, {write, elements(?VALUES), range(0, 2)}},   % value, HLC increment
               {2, delete},
               {2, {delete_object, elements(?VALUES)}}]).

ec_step() ->
    frequency([{3, {op, range(1, 4), ec_op()}},
               {5, {deliver, range(1, 4), non_neg_integer()}},
               {1, {ack, range(1, 4), range(1, 4)}},
               {1, {catch_up, range(1, 4)}},
               {1, gossip},
               {1, {settle, vector(4, boolean())}},
               {2, {stabilize, range(1, 4)}},
               {1, {merge, range(1, 4), range(1, 4)}}]).

%% A burst of operations before any delivery (so they are concurrent: payload conflicts),
%% then a long random schedule.
ec_steps() ->
    ?LET({Burst, Rest},
         {non_empty(list({op, range(1, 4), ec_op()})),
          ?SIZED(Size, resize(3 * Size, list(ec_step())))},
         Burst ++ Rest).

prop_ec_key(Type, Policy) ->
    ?SAFE_FORALL({N, Steps, Seed},
                 {range(2, 4), ec_steps(), integer()},
                 begin
                     {Res, Tags} = run_ec(Type, Policy, N, Steps, Seed),
                     ?WHENFAIL(io:format(user, "~p/~p, ~p replicas: ~p~n", [Type, Policy, N, Res]),
                               stats(Tags, Res =:= ok))
                 end).

%% Model, per replica I: ks (the key state), dl (delivered vector), known (J => what J is
%% known here to have delivered: the timestamps of J's delivered events and J's settled
%% acks), hlc (the greatest hybrid clock time seen). Events: {Id, Origin, Dot, Ts, Op}, in
%% issue order. The final drain delivers everything in an order drawn from Seed, with more
%% stabilizations.
run_ec(Type, Policy, N, Steps, Seed) ->
    Rep = #{ks => hm_ec_key:new(), dl => hm_vv:new(), known => #{}, hlc => 0},
    S0 = #{type => Type, policy => Policy, n => N, evs => [], next => 1,
           reps => maps:from_list([{I, Rep} || I <- lists:seq(1, N)]),
           rand => rand:seed_s(exsss, {Seed, 7, 11}),
           st => #{stable => 0, lossy => 0, unstable => 0, early_ack => 0, ack => 0, drained => 0,
                   merge => 0}},
    try
        S1 = lists:foldl(fun ec_exec/2, S0, Steps),
        S2 = ec_drain(S1),
        #{reps := Reps, evs := Evs} = S2,
        Views = [view(S2, I) || I <- lists:seq(1, N)],
        [throw({diverged, Views}) || length(lists:usort(Views)) =/= 1],
        Expected = spec(Type, Policy, Evs),
        [throw({final_spec, {expected, Expected}, {actual, hd(Views)}}) || hd(Views) =/= Expected],
        %% quiescence: every replica delivered everything, so everything is stable
        All = lists:foldl(fun({_, _, _, Ts, _}, V) -> hm_vv:join(V, Ts) end, hm_vv:new(), Evs),
        [begin
             KSq = hm_ec_key:stabilize(Type, Policy, {All, KS}),
             [throw({quiescent_metadata, I, KSq}) || hm_ec_key:timestamps(KSq) =/= 0],
             %% and no version the policy does not show: no metadata row is left
             [throw({quiescent_versions, I, KSq})
              || Policy =/= siblings, hm_ec_key:compact(Type, Policy, KSq) =/= none],
             [throw({quiescent_stabilize, I, KSq, hd(Views)})
              || hm_ec_key:view(Type, Policy, KSq) =/= hd(Views)]
         end || {I, #{ks := KS}} <- maps:to_list(Reps)],
        {ok, ec_tags(S2, Expected)}
    catch throw:Why -> {Why, []};
          Class:Reason:Stack -> {{crashed, Class, Reason, lists:sublist(Stack, 4)}, []}
    end.

ec_tags(#{evs := Evs, st := St}, Final) ->
    Writes = [E || E = {_, _, _, _, {write, _, _}} <- Evs],
    Conc = length([x || A <- Writes, B <- Writes, A < B, concurrent(A, B)]),
    Payload = length([x || A = {_, _, _, _, {write, RA, _}} <- Writes,
                           B = {_, _, _, _, {write, RB, _}} <- Writes,
                           A < B, RA =/= RB, concurrent(A, B)]),
    [{events, bucket(length(Evs))}, {concurrent_write_pairs, bucket(Conc)},
     {concurrent_different_payloads, bucket(Payload)},
     {stabilize_stable, bucket(maps:get(stable, St))},
     {stabilize_unstable, bucket(maps:get(unstable, St))},
     {stabilize_dropping_versions, bucket(maps:get(lossy, St))},
     {merges, bucket(maps:get(merge, St))},
     {final_view_size, length(Final)}].

ec_exec({op, I0, Op0}, S = #{n := N, reps := Reps, evs := Evs, next := Id, type := Type,
                             policy := Policy}) ->
    I = (I0 - 1) rem N + 1,
    R = rep(I),
    #{dl := Dl, hlc := H, ks := KS} = maps:get(I, Reps),
    Ts = hm_vv:increment(R, Dl),
    Dot = {R, hm_vv:get(R, Ts)},
    Asked = case Op0 of
                {write, V, Inc} -> {write, rec(V), {H + 1 + Inc, R}};
                delete -> delete;
                {delete_object, V} -> {delete_object, rec(V)}
            end,
    %% what the operation is, by the spec over what its origin has delivered, and what the
    %% implementation prepares from its own view there: the same
    Op = spec_prepare(Policy, Asked, spec(Type, Policy, delivered_events(I, S))),
    case hm_ec_key:prepare(Policy, Asked, hm_ec_key:view(Type, Policy, KS)) of
        Op -> ok;
        Prepared -> throw({prepare, rep(I), {asked, Asked}, {spec, Op}, {prepared, Prepared}})
    end,
    Ev = {Id, I, Dot, Ts, Op},
    ec_apply(I, Ev, S#{evs := Evs ++ [Ev], next := Id + 1});
ec_exec({deliver, J0, K}, S = #{n := N}) ->
    J = (J0 - 1) rem N + 1,
    case ready(J, S) of
        [] -> S;
        Ready -> ec_apply(J, lists:nth(K rem length(Ready) + 1, Ready), S)
    end;
ec_exec({ack, F0, T0}, S = #{n := N, reps := Reps, st := St}) ->
    From = (F0 - 1) rem N + 1,
    To = (T0 - 1) rem N + 1,
    #{dl := DlF} = maps:get(From, Reps),
    RT = #{dl := DlT, known := K} = maps:get(To, Reps),
    if From =:= To -> S;
       %% as hm_tcsb: an ack counts once every event its sender issued has arrived here
       true ->
            case hm_vv:get(rep(From), DlF) =< hm_vv:get(rep(From), DlT) of
                true ->
                    K1 = K#{From => hm_vv:join(maps:get(From, K, #{}), DlF)},
                    S#{reps := Reps#{To := RT#{known := K1}}, st := bump(ack, St)};
                false -> S#{st := bump(early_ack, St)}
            end
    end;
ec_exec({catch_up, J0}, S = #{n := N}) ->
    %% replica J delivers everything issued so far
    J = (J0 - 1) rem N + 1,
    case ready(J, S) of
        [] -> S;
        [E | _] -> ec_exec({catch_up, J}, ec_apply(J, E, S))
    end;
ec_exec(gossip, S = #{n := N}) ->
    %% every replica acknowledges to every other one
    lists:foldl(fun({F, T}, Acc) -> ec_exec({ack, F, T}, Acc) end, S,
                [{F, T} || F <- lists:seq(1, N), T <- lists:seq(1, N), F =/= T]);
ec_exec({settle, Which}, S = #{n := N}) ->
    %% quiescence, then stabilization at some replicas only (the others lag behind)
    S1 = lists:foldl(fun(J, Acc) -> ec_exec({catch_up, J}, Acc) end, S, lists:seq(1, N)),
    S2 = ec_exec(gossip, S1),
    lists:foldl(fun({J, true}, Acc) -> ec_exec({stabilize, J}, Acc);
                   (_, Acc) -> Acc
                end, S2, lists:zip(lists:seq(1, N), lists:sublist(Which, N)));
ec_exec({merge, I0, J0}, S = #{n := N, reps := Reps, st := St}) ->
    %% catching up by state: replica I joins replica J's key state (hm_ec_key:join/2) and
    %% counts as delivered what J delivered; the table then keeps no metadata when storage
    %% says it all, as after an effect
    I = (I0 - 1) rem N + 1,
    J = (J0 - 1) rem N + 1,
    RI = #{ks := KSI, dl := DlI, hlc := HI} = maps:get(I, Reps),
    #{ks := KSJ, dl := DlJ, hlc := HJ} = maps:get(J, Reps),
    case I =:= J orelse hm_vv:leq(DlJ, DlI) of
        true -> S;
        false ->
            KS = hm_ec_key:join({DlI, KSI}, {DlJ, KSJ}),
            KS1 = case hm_ec_key:compact(maps:get(type, S), maps:get(policy, S), KS) of
                      none -> hm_ec_key:new(view_of(S, KS));
                      _ -> KS
                  end,
            check_view(I, S#{reps := Reps#{I := RI#{ks := KS1, dl := hm_vv:join(DlI, DlJ),
                                                     hlc := max(HI, HJ)}},
                             st := bump(merge, St)})
    end;
ec_exec({stabilize, I0}, S = #{n := N, type := Type, policy := Policy, reps := Reps, st := St}) ->
    I = (I0 - 1) rem N + 1,
    V = stable_vv(I, S),
    %% model sanity: the vector is causally stable (every replica delivered it)
    [throw({model_unsafe_stable_vector, I, V}) || {_, #{dl := DlJ}} <- maps:to_list(Reps),
                                                  not hm_vv:leq(V, DlJ)],
    RI = #{ks := KS} = maps:get(I, Reps),
    View0 = hm_ec_key:view(Type, Policy, KS),
    {KS1, St1} = case hm_ec_key:stabilize(Type, Policy, {V, KS}) of
                     KS -> {KS, bump(unstable, St)};
                     Stable = {Vs, []} ->
                         %% 'lossy' counts stabilizations that drop versions the policy
                         %% does not show (siblings: none)
                         Lossy = length(Vs) > length(hm_ec_key:view(Type, Policy, Stable)),
                         {Stable, bump(case Lossy of
                                           true -> lossy;
                                           false -> stable
                                       end, St)};
                     Other -> throw({stabilize_result, Other})
                 end,
    View1 = hm_ec_key:view(Type, Policy, KS1),
    [throw({stabilize_changed_view, rep(I), {vector, V}, {state, KS}, {before, View0},
            {'after', View1}}) || View0 =/= View1],
    check_view(I, S#{reps := Reps#{I := RI#{ks := KS1}}, st := St1}).

bump(Key, M) -> M#{Key => maps:get(Key, M) + 1}.

%% Events not delivered at J whose causal past J has delivered.
ready(J, #{reps := Reps, evs := Evs}) ->
    #{dl := Dl} = maps:get(J, Reps),
    [E || E = {_, _, {R, C}, Ts, _} <- Evs, C =:= hm_vv:get(R, Dl) + 1,
          hm_vv:leq(maps:remove(R, Ts), Dl)].

%% Deliver (or issue) event Ev at replica J.
ec_apply(J, {_, Origin, Dot, Ts, Op}, S = #{type := Type, reps := Reps}) ->
    RJ = #{ks := KS, dl := Dl, known := K, hlc := H} = maps:get(J, Reps),
    KS1 = hm_ec_key:effect(Type, Op, Dot, Ts, KS),
    %% hm_ec_server keeps no metadata row when storage says it all (compact/3): the state is
    %% then rebuilt from what storage shows
    KS2 = case hm_ec_key:compact(Type, maps:get(policy, S), KS1) of
              none -> hm_ec_key:new(view_of(S, KS1));
              _ -> KS1
          end,
    H1 = case Op of
             {write, _, {T, _}} -> max(H, T);
             _ -> H
         end,
    K1 = case Origin of
             J -> K;
             _ -> K#{Origin => hm_vv:join(maps:get(Origin, K, #{}), Ts)}
         end,
    check_view(J, S#{reps := Reps#{J := RJ#{ks := KS2, dl := hm_vv:join(Dl, Ts), known := K1,
                                             hlc := H1}}}).

view_of(#{type := Type, policy := Policy}, KS) -> hm_ec_key:view(Type, Policy, KS).
view(S = #{reps := Reps}, I) -> view_of(S, maps:get(ks, maps:get(I, Reps))).

%% The events replica I has delivered (a causally closed set).
delivered_events(I, #{reps := Reps, evs := Evs}) ->
    #{dl := Dl} = maps:get(I, Reps),
    [E || E = {_, _, D, _, _} <- Evs, hm_vv:contains(D, Dl)].

%% A replica's view must be the spec of the events it has delivered.
check_view(I, S = #{type := Type, policy := Policy, reps := Reps, evs := Evs}) ->
    #{ks := KS} = maps:get(I, Reps),
    Expected = spec(Type, Policy, delivered_events(I, S)),
    case view_of(S, KS) of
        Expected -> S;
        Actual -> throw({view_vs_spec, rep(I), {expected, Expected}, {actual, Actual},
                         {state, KS}, {events, Evs}})
    end.

%% The Hypermnesia paper's Algorithm 1, "check stability", at I: own delivered vector met
%% with what every other replica is known to have delivered.
stable_vv(I, #{n := N, reps := Reps}) ->
    #{dl := Dl, known := K} = maps:get(I, Reps),
    lists:foldl(fun(J, V) when J =:= I -> V;
                   (J, V) -> hm_vv:meet(V, maps:get(J, K, #{}))
                end, Dl, lists:seq(1, N)).

%% Deliver everything left, in a random causal order, with random stabilizations.
ec_drain(S = #{n := N, rand := R0, st := St}) ->
    case [{J, E} || J <- lists:seq(1, N), E <- ready(J, S)] of
        [] -> S;
        Ready ->
            {X, R1} = rand:uniform_s(length(Ready), R0),
            {Y, R2} = rand:uniform_s(4, R1),
            {J, E} = lists:nth(X, Ready),
            S1 = ec_apply(J, E, S#{rand := R2, st := bump(drained, St)}),
            S2 = case Y of
                     1 -> ec_exec({stabilize, J}, S1);
                     2 -> ec_exec({ack, J, (X rem N) + 1}, S1);
                     _ -> S1
                 end,
            ec_drain(S2)
    end.

%%% ---------------------------------------------------------------- declarative spec

%% What a replica that delivered exactly the events `Evs' (causally closed) must show,
%% from the operations and happened-before alone. An event is superseded when an event that
%% causally follows it overwrites it: a write or a delete overwrites everything before it, a
%% delete_object of record R what it names (writes of R, delete_objects of R).
%% pawset: the live versions are the records of the writes not superseded (add-wins: a delete
%% or delete_object only removes what it has seen).
%% prwset: the key is absent while some delete is not superseded (remove-wins: it beats every
%% concurrent write, and a later delete_object of another record does not revive anything);
%% otherwise the records of the writes not superseded, minus the records named by a
%% delete_object not superseded (it beats concurrent writes of its record).
%% Then the policy: term_order the greatest record; siblings every record, sorted; lww the
%% record of the live write with the greatest hybrid logical clock.
spec(Type, Policy, Evs) ->
    Current = [E || E <- Evs, not lists:any(fun(Y) -> before(E, Y) andalso supersedes(Y, E) end,
                                            Evs)],
    Writes = [{Rec, H} || {_, _, _, _, {write, Rec, H}} <- Current],
    Live = case Type of
               pawset -> Writes;
               prwset ->
                   case [x || {_, _, _, _, delete} <- Current] of
                       [] ->
                           Gone = [R || {_, _, _, _, {delete_object, R}} <- Current],
                           [W || W = {R, _} <- Writes, not lists:member(R, Gone)];
                       _ -> []
                   end
           end,
    case {Policy, Live} of
        {_, []} -> [];
        {term_order, _} -> [lists:max([R || {R, _} <- Live])];
        {siblings, _} -> lists:usort([R || {R, _} <- Live]);
        {lww, _} -> [element(2, lists:max([{H, R} || {R, H} <- Live]))]
    end.

%% What an operation asked for at a replica whose spec shows `Shown' is: under term_order and
%% lww, a delete_object of the record shown there deletes the key as that replica saw it.
spec_prepare(Policy, {delete_object, Rec}, [Rec]) when Policy =/= siblings -> delete;
spec_prepare(_, Op, _) -> Op.

before({_, _, DotA, _, _} = A, {_, _, _, TsB, _} = B) ->
    A =/= B andalso hm_vv:contains(DotA, TsB).

concurrent(A, B) -> A =/= B andalso not before(A, B) andalso not before(B, A).

supersedes({_, _, _, _, {write, _, _}}, _) -> true;
supersedes({_, _, _, _, delete}, _) -> true;
supersedes({_, _, _, _, {delete_object, R}}, {_, _, _, _, {write, R, _}}) -> true;
supersedes({_, _, _, _, {delete_object, R}}, {_, _, _, _, {delete_object, R}}) -> true;
supersedes(_, _) -> false.

%%% ================================================================ hm_tcsb

-define(NODES, {'n1@h', 'n2@h', 'n3@h', 'n4@h'}).

node_of(I) -> element(I, ?NODES).
rid(I) -> {node_of(I), 1}.
idx(Node) -> idx(Node, 1).
idx(Node, I) ->
    case node_of(I) of
        Node -> I;
        _ -> idx(Node, I + 1)
    end.

tcsb_step() ->
    frequency([{4, {bcast, range(1, 4)}},
               {8, {deliver, non_neg_integer()}},
               {1, {dup, non_neg_integer()}},
               {1, {drop, non_neg_integer()}},
               {2, {acks, range(1, 4)}},
               {1, {cut, range(1, 4)}},
               {1, {reconnect, range(1, 4), range(1, 4)}},
               {1, {resend_old, range(1, 4)}},
               {1, {tick, range(1, 4)}},
               {1, {gc, range(1, 4)}},
               {1, {flush, range(1, 4)}},
               {1, heal}]).

%% A few broadcasts first (concurrent ones), then a long random schedule.
tcsb_steps() ->
    ?LET({Burst, Rest},
         {list({bcast, range(1, 4)}), ?SIZED(Size, resize(3 * Size, list(tcsb_step())))},
         Burst ++ Rest).

prop_tcsb() ->
    ?SAFE_FORALL({N, Steps, Seed},
                 {range(2, 4), tcsb_steps(), integer()},
                 begin
                     {Res, Tags} = run_tcsb(N, Steps, Seed),
                     ?WHENFAIL(io:format(user, "tcsb, ~p members: ~p~n", [N, Res]),
                               stats(Tags, Res =:= ok))
                 end).

%% Model, per member I: b (the hm_tcsb state), dl (delivered vector), got (Dot => Message
%% delivered), floor (join of every stable/1 seen: no later delivery may be concurrent with
%% it), gcv (the stable vector of the last gc/1: the log holds got minus gcv), lo (J => join of
%% the timestamps of J's messages delivered here: certainly known), acks (J => join of every
%% ack from J received here). Network: [{From, To, Msg}] in flight.
run_tcsb(N, Steps, Seed) ->
    Members = [node_of(I) || I <- lists:seq(1, N)],
    M = fun(I) -> #{b => hm_tcsb:new(rid(I), Members), dl => hm_vv:new(), got => #{},
                    floor => hm_vv:new(), gcv => hm_vv:new(), lo => #{}, acks => #{}} end,
    S0 = #{n => N, m => maps:from_list([{I, M(I)} || I <- lists:seq(1, N)]), net => [],
           msgs => [], next => 1, rand => rand:seed_s(exsss, {Seed, 3, 5}),
           st => #{bcast => 0, lost => 0, dup => 0, resent => 0, stable_moves => 0,
                   max_pending => 0, final_deliveries => 0, gc_freed => 0, after_stable => 0}},
    try
        S1 = lists:foldl(fun(Step, S) -> tcsb_check(tcsb_exec(Step, S)) end, S0, Steps),
        LogBefore = lists:sum([hm_tcsb:log_size(B) || #{b := B} <- maps:values(maps:get(m, S1))]),
        Mid = maps:get(st, S1),
        %% reconnect everyone, deliver everything in flight
        S2 = lists:foldl(fun({I, J}, S) -> tcsb_check(tcsb_exec({reconnect, I, J}, S)) end,
                         S1#{st := (maps:get(st, S1))#{final_deliveries := 0}},
                         [{I, J} || I <- lists:seq(1, N), J <- lists:seq(1, N), I =/= J]),
        S3 = tcsb_drain(S2),
        #{msgs := Msgs} = S3,
        All = lists:foldl(fun({_, Ts, _}, V) -> hm_vv:join(V, Ts) end, hm_vv:new(), Msgs),
        [throw({not_all_delivered, I, hm_vv:to_list(Dl), hm_vv:to_list(All),
                {pending, hm_tcsb:pending(B)}})
         || {I, #{dl := Dl, b := B}} <- maps:to_list(maps:get(m, S3)),
            Dl =/= All orelse hm_tcsb:pending(B) =/= 0],
        [throw({delivered_count, I, map_size(Got), length(Msgs)})
         || {I, #{got := Got}} <- maps:to_list(maps:get(m, S3)), map_size(Got) =/= length(Msgs)],
        %% one round of acks: everything is stable everywhere, gc empties every log
        S4 = tcsb_drain(lists:foldl(fun(I, S) -> tcsb_exec({acks, I}, S) end, S3,
                                    lists:seq(1, N))),
        [throw({final_stable, I, hm_vv:to_list(hm_tcsb:stable(B)), hm_vv:to_list(All)})
         || {I, #{b := B}} <- maps:to_list(maps:get(m, S4)), hm_tcsb:stable(B) =/= All],
        S5 = lists:foldl(fun(I, S) -> tcsb_check(tcsb_exec({gc, I}, S)) end, S4,
                         lists:seq(1, N)),
        [throw({final_log, I, hm_tcsb:log_size(B)})
         || {I, #{b := B}} <- maps:to_list(maps:get(m, S5)), hm_tcsb:log_size(B) =/= 0],
        #{st := St} = S5,
        {ok, [{members, N}, {broadcasts, bucket(length(Msgs))},
              {lost_in_flight, bucket(maps:get(lost, Mid))},
              {duplicates, bucket(maps:get(dup, Mid))},
              {resent_by_missing_midrun, bucket(maps:get(resent, Mid))},
              {stable_advances_midrun, bucket(maps:get(stable_moves, Mid))},
              {gc_freed_midrun, bucket(maps:get(gc_freed, Mid))},
              {max_pending_midrun, bucket(maps:get(max_pending, Mid))},
              {deliveries_checked_against_stable_midrun, bucket(maps:get(after_stable, Mid))},
              {log_before_final, bucket(LogBefore)},
              {final_phase_deliveries, bucket(maps:get(final_deliveries, St))}]}
    catch throw:Why -> {Why, []};
          Class:Reason:Stack -> {{crashed, Class, Reason, lists:sublist(Stack, 4)}, []}
    end.

mem(I, #{m := Ms}) -> maps:get(I, Ms).
put_mem(I, X, S = #{m := Ms}) -> S#{m := Ms#{I := X}}.
norm(I0, #{n := N}) -> (I0 - 1) rem N + 1.
pick(K, L) -> lists:nth(K rem length(L) + 1, L).
without(K, L) ->
    {A, [_ | B]} = lists:split(K rem length(L), L),
    A ++ B.

tcsb_exec({bcast, I0}, S = #{next := P, msgs := Msgs, net := Net, st := St}) ->
    I = norm(I0, S),
    X = #{b := B, dl := Dl} = mem(I, S),
    {Msg = {Origin, Ts, Payload}, Sends, B1} = hm_tcsb:broadcast({p, P}, B),
    [throw({broadcast_message, Msg}) || Origin =/= rid(I) orelse Payload =/= {p, P} orelse
                                            Ts =/= hm_vv:increment(rid(I), Dl)],
    Expected = lists:sort([{node_of(J), {op, Msg}} || J <- lists:seq(1, maps:get(n, S)), J =/= I]),
    [throw({broadcast_sends, Sends, Expected}) || lists:sort(Sends) =/= Expected],
    S1 = S#{next := P + 1, msgs := Msgs ++ [Msg], st := bump(bcast, St),
            net := Net ++ [{I, idx(To), Out} || {To, Out} <- Sends]},
    delivered_here(I, Msg, put_mem(I, X#{b := B1}, S1));
tcsb_exec({Kind, _}, S = #{net := []}) when Kind =:= deliver; Kind =:= dup; Kind =:= drop -> S;
tcsb_exec({deliver, K}, S = #{net := Net}) ->
    net_deliver(pick(K, Net), S#{net := without(K, Net)});
tcsb_exec({dup, K}, S = #{net := Net, st := St}) ->
    net_deliver(pick(K, Net), S#{st := bump(dup, St)});
tcsb_exec({drop, K}, S = #{net := Net, st := St}) ->
    S#{net := without(K, Net), st := bump(lost, St)};
tcsb_exec({acks, I0}, S = #{net := Net}) ->
    I = norm(I0, S),
    #{b := B, dl := Dl} = mem(I, S),
    Acks = hm_tcsb:acks(B),
    Expected = lists:sort([{node_of(J), {ack, rid(I), Dl}} || J <- lists:seq(1, maps:get(n, S)),
                                                              J =/= I]),
    Got = lists:sort([{To, {ack, R, V}} || {To, {ack, R, V, _Newest}} <- Acks]),
    [throw({acks, Acks, Expected}) || Got =/= Expected],
    S#{net := Net ++ [{I, idx(To), A} || {To, A} <- Acks]};
tcsb_exec({cut, I0}, S = #{net := Net, st := St}) ->
    I = norm(I0, S),
    Kept = [E || E = {F, T, _} <- Net, F =/= I, T =/= I],
    S#{net := Kept, st := St#{lost := maps:get(lost, St) + length(Net) - length(Kept)}};
tcsb_exec({reconnect, I0, J0}, S = #{net := Net, st := St}) ->
    I = norm(I0, S),
    J = norm(J0, S),
    case I =:= J of
        true -> S;
        false ->
            Miss = hm_tcsb:missing(node_of(J), all, maps:get(b, mem(I, S))),
            check_missing(I, J, Miss, S),
            S#{net := Net ++ [{I, J, {op, Msg}} || Msg <- Miss],
               st := St#{resent := maps:get(resent, St) + length(Miss)}}
    end;
tcsb_exec({resend_old, I0}, S = #{n := N, net := Net, st := St}) ->
    I = norm(I0, S),
    #{b := B} = mem(I, S),
    Out = lists:append(
            [begin
                 Old = hm_tcsb:missing(node_of(J), old, B),
                 AllMiss = hm_tcsb:missing(node_of(J), all, B),
                 [throw({missing_old_not_subset, I, J, Old, AllMiss})
                  || not lists:all(fun(Msg) -> lists:member(Msg, AllMiss) end, Old)],
                 [{I, J, {op, Msg}} || Msg <- Old]
             end || J <- lists:seq(1, N), J =/= I]),
    S#{net := Net ++ Out, st := St#{resent := maps:get(resent, St) + length(Out)}};
tcsb_exec({flush, I0}, S = #{net := Net}) ->
    %% member I receives everything in flight to it, in the network's order
    I = norm(I0, S),
    {ToI, Rest} = lists:partition(fun({_, T, _}) -> T =:= I end, Net),
    lists:foldl(fun(E, Acc) -> tcsb_check(net_deliver(E, Acc)) end, S#{net := Rest}, ToI);
tcsb_exec(heal, S = #{n := N}) ->
    %% the partition heals: everyone repairs everyone, everything in flight arrives, then
    %% everyone acknowledges (the acks stay in flight, among later traffic)
    S1 = lists:foldl(fun({I, J}, Acc) -> tcsb_check(tcsb_exec({reconnect, I, J}, Acc)) end, S,
                     [{I, J} || I <- lists:seq(1, N), J <- lists:seq(1, N), I =/= J]),
    lists:foldl(fun(I, Acc) -> tcsb_exec({acks, I}, Acc) end, tcsb_drain(S1), lists:seq(1, N));
tcsb_exec({tick, I0}, S) ->
    I = norm(I0, S),
    X = #{b := B} = mem(I, S),
    put_mem(I, X#{b := hm_tcsb:tick(B)}, S);
tcsb_exec({gc, I0}, S = #{st := St}) ->
    I = norm(I0, S),
    X = #{b := B, gcv := G} = mem(I, S),
    V = hm_tcsb:stable(B),
    B1 = hm_tcsb:gc(B),
    St1 = St#{gc_freed := maps:get(gc_freed, St) + hm_tcsb:log_size(B) - hm_tcsb:log_size(B1)},
    put_mem(I, X#{b := B1, gcv := hm_vv:join(G, V)}, S#{st := St1}).

net_deliver({_From, To, {op, Msg}}, S = #{st := St}) ->
    X = #{b := B} = mem(To, S),
    {Ready, B1} = hm_tcsb:receive_op(Msg, B),
    S1 = put_mem(To, X#{b := B1}, S),
    Pending = hm_tcsb:pending(B1),
    S2 = S1#{st := St#{max_pending := max(Pending, maps:get(max_pending, St)),
                       final_deliveries := maps:get(final_deliveries, St) + length(Ready)}},
    lists:foldl(fun(M, Acc) -> delivered_here(To, M, Acc) end, S2, Ready);
net_deliver({_From, To, {ack, R = {Node, _}, V, Newest}}, S) ->
    X = #{b := B, acks := A} = mem(To, S),
    J = idx(Node),
    put_mem(To, X#{b := hm_tcsb:receive_ack(R, V, Newest, B),
                   acks := A#{J => hm_vv:join(maps:get(J, A, #{}), V)}}, S).

%% Message Msg was just delivered at member I (by broadcast/2 or receive_op/2).
delivered_here(I, Msg = {Origin = {Node, _}, Ts, _}, S = #{msgs := Msgs}) ->
    X = #{dl := Dl, got := Got, floor := Floor, lo := Lo} = mem(I, S),
    Dot = {Origin, hm_vv:get(Origin, Ts)},
    [throw({not_a_broadcast_message, I, Msg}) || not lists:member(Msg, Msgs)],
    [throw({delivered_twice, I, Dot}) || maps:is_key(Dot, Got)],
    Ready = hm_vv:get(Origin, Ts) =:= hm_vv:get(Origin, Dl) + 1 andalso
        hm_vv:leq(maps:remove(Origin, Ts), Dl),
    [throw({not_causal, I, Dot, {delivered, Dl}, {ts, Ts}}) || not Ready],
    %% (c): nothing delivered after stable/1 = Floor may be concurrent with it
    [throw({stability_violated, I, {stable, Floor}, {later_message, Msg}})
     || not hm_vv:leq(Floor, Ts)],
    J = idx(Node),
    Lo1 = case J of
              I -> Lo;
              _ -> Lo#{J => hm_vv:join(maps:get(J, Lo, #{}), Ts)}
          end,
    S1 = case Floor of
             #{} when map_size(Floor) > 0 ->
                 St = maps:get(st, S),
                 S#{st := bump(after_stable, St)};
             _ -> S
         end,
    put_mem(I, X#{dl := hm_vv:join(Dl, Ts), got := Got#{Dot => Msg}, lo := Lo1}, S1).

%% After every step, at every member: delivered/1 is the model's, stable/1 is truly stable
%% (every member delivered it), never goes back, and the log is what was delivered and not
%% collected.
tcsb_check(S = #{m := Ms, st := St}) ->
    Dls = [Dl || #{dl := Dl} <- maps:values(Ms)],
    {Ms1, Moves} =
        maps:fold(
          fun(I, X = #{b := B, dl := Dl, floor := Floor, got := Got, gcv := G}, {Acc, Mv}) ->
                  [throw({delivered_vector, I, hm_tcsb:delivered(B), Dl})
                   || hm_tcsb:delivered(B) =/= Dl],
                  V = hm_tcsb:stable(B),
                  [throw({stable_not_delivered_everywhere, I, {stable, V}, {delivered, Dls}})
                   || not lists:all(fun(D) -> hm_vv:leq(V, D) end, Dls)],
                  [throw({stable_went_back, I, Floor, V}) || not hm_vv:leq(Floor, V)],
                  Log = [D || D <- maps:keys(Got), not hm_vv:contains(D, G)],
                  [throw({log_size, I, hm_tcsb:log_size(B), lists:sort(Log)})
                   || hm_tcsb:log_size(B) =/= length(Log)],
                  {Acc#{I := X#{floor := V}}, Mv + case V of Floor -> 0; _ -> 1 end}
          end, {Ms, 0}, Ms),
    S#{m := Ms1, st := St#{stable_moves := maps:get(stable_moves, St) + Moves}}.

%% (d): missing(J, all, I) after a partition. Complete: every logged message J has not
%% delivered (truly), and every one not covered by what J told I (messages and acks), is
%% there. Sound: only logged messages, no duplicates, each origin's messages in sequence order.
check_missing(I, J, Miss, S) ->
    #{got := Got, gcv := G, lo := Lo, acks := A} = mem(I, S),
    #{dl := DlJ} = mem(J, S),
    Log = [M || {D, M} <- maps:to_list(Got), not hm_vv:contains(D, G)],
    KnownLo = maps:get(J, Lo, #{}),
    KnownHi = hm_vv:join(KnownLo, maps:get(J, A, #{})),
    DotOf = fun({O, Ts, _}) -> {O, hm_vv:get(O, Ts)} end,
    Fail = fun(Why) -> throw({missing, Why, {from, I}, {peer, J}, {missing, Miss}, {log, Log},
                              {known_lo, KnownLo}, {known_hi, KnownHi}, {peer_has, DlJ}})
           end,
    [Fail(duplicates) || length(lists:usort(Miss)) =/= length(Miss)],
    [Fail({not_logged, M}) || M <- Miss, not lists:member(M, Log)],
    %% (No longer asserted: that nothing is offered which J's own messages showed it had.
    %% hm_tcsb learns what a member has from its acknowledgements only, since a relayed
    %% operation can outlive its origin's incarnation; such a resend is a harmless duplicate.)
    [Fail({left_out, M}) || M <- Log, not lists:member(M, Miss),
                            not hm_vv:contains(DotOf(M), KnownHi)],
    [Fail({left_out_peer_lacks, M}) || M <- Log, not lists:member(M, Miss),
                                       not hm_vv:contains(DotOf(M), DlJ)],
    Seqs = lists:map(DotOf, Miss),
    [Fail(out_of_order) || O <- lists:usort([O || {O, _} <- Seqs]),
                           begin Cs = [C || {O1, C} <- Seqs, O1 =:= O], Cs =/= lists:sort(Cs) end],
    ok.

%% Deliver everything in flight, in a random order (acks and ops alike).
tcsb_drain(S = #{net := []}) -> S;
tcsb_drain(S = #{net := Net, rand := R0}) ->
    {X, R1} = rand:uniform_s(length(Net), R0),
    tcsb_drain(tcsb_check(tcsb_exec({deliver, X - 1}, S#{rand := R1}))).

%%% ================================================================ delete_object after stabilize

%% A delete_object of the record a replica shows leaves every replica alike, whether or not
%% the others stabilized: it is prepared as a delete, since stabilization keeps only the
%% shown version; sent as asked, it would leave the version stabilization dropped at one
%% replica only. A minimised prop_ec_key schedule: r2 writes b, r1 writes a (concurrent);
%% both replicas deliver both; r2 stabilizes (b shows under term_order, and under lww the
%% write with the greater clock), r1 not yet. r1 then deletes object b, the record it shows:
%% prepared as a delete, it leaves both replicas empty. A delete_object of a, which r1 does
%% not show, stays one: both replicas show b.
stabilize_then_delete_object_test_() ->
    [{lists:flatten(io_lib:format("~p/~p", [T, P])), ?_test(stabilize_then_delete_object(T, P))}
     || T <- [pawset, prwset], P <- [term_order, lww, siblings]].

stabilize_then_delete_object(Type, Policy) ->
    A = {write, rec(a), {2, r1}},           % the lww winner is b: {2, r2} > {2, r1}
    B = {write, rec(b), {2, r2}},
    Eff = fun(Op, Dot, Ts, KS) -> hm_ec_key:effect(Type, Op, Dot, Ts, KS) end,
    R1 = Eff(B, {r2, 1}, #{r2 => 1}, Eff(A, {r1, 1}, #{r1 => 1}, hm_ec_key:new())),
    R2 = Eff(A, {r1, 1}, #{r1 => 1}, Eff(B, {r2, 1}, #{r2 => 1}, hm_ec_key:new())),
    R2s = hm_ec_key:stabilize(Type, Policy, {#{r1 => 1, r2 => 1}, R2}),
    ?assertEqual(0, hm_ec_key:timestamps(R2s)),
    Shown = hm_ec_key:view(Type, Policy, R1),
    ?assertEqual(Shown, hm_ec_key:view(Type, Policy, R2s)),
    DelTs = #{r1 => 2, r2 => 1},
    Del = fun(V) -> hm_ec_key:prepare(Policy, {delete_object, rec(V)}, Shown) end,
    After = fun(V, KS) -> hm_ec_key:view(Type, Policy, Eff(Del(V), {r1, 2}, DelTs, KS)) end,
    case Policy of
        siblings ->
            %% both show: a delete_object removes its record only
            ?assertEqual([rec(a), rec(b)], Shown),
            ?assertEqual([rec(a)], After(b, R1)),
            ?assertEqual([rec(a)], After(b, R2s));
        _ ->
            ?assertEqual([rec(b)], Shown),
            ?assertEqual(delete, Del(b)),
            ?assertEqual([], After(b, R1)),
            ?assertEqual([], After(b, R2s)),
            ?assertEqual({delete_object, rec(a)}, Del(a)),
            ?assertEqual([rec(b)], After(a, R1)),
            ?assertEqual([rec(b)], After(a, R2s)),
            %% the stable key keeps the shown version only: no metadata row
            ?assertEqual(none, hm_ec_key:compact(Type, Policy, R2s))
    end.

%%% ================================================================ join: one entry a side

%% After a cut each side of a key usually holds one unstable write and no stable version:
%% each write survives unless the other side delivered it (then an operation there
%% superseded it); the same write on both sides is kept once.
join_one_entry_a_side_test() ->
    A = {{r1, 3}, write, {rec(a), {5, r1}}},
    B = {{r2, 4}, write, {rec(b), {6, r2}}},
    Join = fun(V1, E1, V2, E2) -> hm_ec_key:join({V1, {[], [E1]}}, {V2, {[], [E2]}}) end,
    %% cut off from each other: both survive
    ?assertEqual({[], [A, B]}, Join(#{r1 => 3}, A, #{r2 => 4}, B)),
    %% r2's side delivered A and superseded it with B: only B
    ?assertEqual({[], [B]}, Join(#{r1 => 3}, A, #{r1 => 3, r2 => 4}, B)),
    %% and the other way round
    ?assertEqual({[], [A]}, Join(#{r1 => 3, r2 => 4}, A, #{r2 => 4}, B)),
    %% the same write on both sides
    ?assertEqual({[], [A]}, Join(#{r1 => 3}, A, #{r1 => 3}, A)),
    %% a prwset delete entry follows the same rule
    Del = {{r2, 4}, delete, undefined},
    ?assertEqual({[], [A, Del]}, Join(#{r1 => 3}, A, #{r2 => 4}, Del)),
    ?assertEqual({[], [Del]}, Join(#{r1 => 3}, A, #{r1 => 3, r2 => 4}, Del)).

%% A key with nothing on one side (made during a cut on the other side only, or deleted
%% and stable on this one): the other side's entries this side has not delivered, none of
%% its stable versions (which this side must have seen gone), whichever side is first.
join_nothing_on_one_side_test() ->
    A = {{r1, 3}, write, {rec(a), {5, r1}}},
    B = {{r2, 4}, write, {rec(b), {6, r2}}},
    Other = {[{rec(c), stable}], [A, B]},
    Empty = {[], []},
    %% this side delivered A: only B
    ?assertEqual({[], [B]}, hm_ec_key:join({#{r1 => 3}, Empty}, {#{r1 => 3, r2 => 4}, Other})),
    ?assertEqual({[], [B]}, hm_ec_key:join({#{r1 => 3, r2 => 4}, Other}, {#{r1 => 3}, Empty})),
    %% neither: both
    ?assertEqual({[], [A, B]}, hm_ec_key:join({#{}, Empty}, {#{r1 => 3, r2 => 4}, Other})),
    %% nothing on either side
    ?assertEqual(Empty, hm_ec_key:join({#{r1 => 3}, Empty}, {#{r2 => 4}, Empty})).

%%% ================================================================ EUnit entry points

-define(P(Name, Prop), {timeout, 1200, {Name, ?_assert(check(Prop))}}).

ec_key_test_() ->
    [?P(lists:flatten(io_lib:format("hm_ec_key ~p/~p: convergence, spec, stabilize", [T, P])),
        prop_ec_key(T, P))
     || T <- [pawset, prwset], P <- [term_order, lww, siblings]].

tcsb_test_() ->
    [?P("hm_tcsb: exactly-once causal delivery, safe stability, missing/3, final gc",
        prop_tcsb())].
