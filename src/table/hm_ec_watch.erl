%% @doc What an operator wants to know about one EC table copy beyond its protocol state,
%% pure: partitions it saw, when a member that came back and this copy had exchanged what
%% each lacked (the catch-up of a heal: how long it took, how many operations it moved),
%% when a copy without state installed a state transfer, and an order-independent digest of
%% the rows, by which copies are compared (strong eventual consistency, as in
%% *Hypermnesia: Eventual Consistency in Mnesia*: copies that delivered the same operations
%% hold the same rows).
%%
%% The table's process ({@link hm_ec_table_server}) holds this state beside the table core's
%% and feeds it the links going down and up and, after every step of the core, the core's
%% state; it returns the events to publish (`[{hm_events:event(), Info}]'). Clocks come in:
%% `{Monotonic, System}', both in milliseconds.
%%
%% A catch-up with member `N' starts when `N' comes back; it is done once `N' has acknowledged
%% everything this copy had delivered when `N' came back, and this copy has delivered
%% everything `N' acknowledged first after it came back. The counts include writes made
%% meanwhile. A state transfer is done when the copy stops `syncing'.
%%
%% Invariants: a catch-up is reported at most once per reconnection, and never for a member
%% that went down again before it was done; the digest depends only on the set of rows.
-module(hm_ec_watch).

-export([new/3, link_down/4, link_up/4, observe/3, report/3, digest/1]).
-export_type([state/0, clock/0]).

-type clock() :: {Monotonic :: integer(), System :: integer()}.
-type catch_up() :: #{since := integer(), mine := hm_vv:vv(), theirs := hm_vv:vv() | undefined,
                      conflicts := non_neg_integer()}.
-opaque state() :: #{tab := atom(),
                     syncing_since := integer() | undefined,
                     partitions := non_neg_integer(),
                     last_partition := map() | undefined,
                     catching_up := #{node() => catch_up()},
                     last_heal := map() | undefined,
                     last_state_transfer := map() | undefined,
                     digest := {hm_vv:vv(), binary()} | undefined}.

%% @doc The watch of a copy taken up now, from the table core's state.
-spec new(clock(), hm_ec_table:state(), atom()) -> state().
new({Mono, _}, T, Tab) ->
    #{tab => Tab,
      syncing_since => case hm_ec_table:status(T) of syncing -> Mono; ready -> undefined end,
      partitions => 0, last_partition => undefined, catching_up => #{}, last_heal => undefined,
      last_state_transfer => undefined, digest => undefined}.

%% @doc Member `N' became unreachable: a partition seen (its catch-up, if any, is abandoned).
-spec link_down(node(), clock(), hm_ec_table:state(), state()) -> state().
link_down(N, {_, Sys}, T, W = #{partitions := P, catching_up := C}) ->
    case is_peer(N, T) of
        true -> W#{partitions := P + 1, last_partition := #{peer => N, time => Sys},
                   catching_up := maps:remove(N, C)};
        false -> W
    end.

%% @doc Member `N' is reachable again: its catch-up starts from what this copy has now.
-spec link_up(node(), clock(), hm_ec_table:state(), state()) -> state().
link_up(N, {Mono, _}, T, W = #{catching_up := C}) ->
    case is_peer(N, T) of
        true -> W#{catching_up := C#{N => #{since => Mono, mine => delivered(T),
                                             theirs => undefined,
                                             conflicts => hm_ec_table:conflicts(T)}}};
        false -> W
    end.

is_peer(N, T) -> N =/= node_of(T) andalso lists:member(N, hm_ec_table:members(T)).

%% @doc After a step of the table core: the catch-ups and the state transfer that are done.
-spec observe(clock(), hm_ec_table:state(), state()) ->
          {state(), [{hm_events:event(), map()}]}.
observe(Clock, T, W) ->
    {W1, E1} = transfer(Clock, T, W),
    {W2, E2} = catch_ups(Clock, T, W1),
    {W2, E1 ++ E2}.

transfer({Mono, Sys}, T, W = #{syncing_since := Since, tab := Tab}) when is_integer(Since) ->
    case hm_ec_table:status(T) of
        syncing -> {W, []};
        ready ->
            Info = #{table => Tab, rows => hm_ec_store:size(hm_ec_table:store(T)),
                     duration_ms => Mono - Since},
            {W#{syncing_since := undefined, last_state_transfer := Info#{time => Sys}},
             [{state_transfer, Info}]}
    end;
transfer(_, _, W) -> {W, []}.

catch_ups(_, _, W = #{catching_up := C}) when map_size(C) =:= 0 -> {W, []};
catch_ups({Mono, Sys}, T, W = #{catching_up := C, tab := Tab}) ->
    Known = hm_tcsb:known(hm_ec_table:tcsb(T)),
    Delivered = delivered(T),
    Self = node_of(T),
    maps:fold(
      fun(N, CU = #{since := Since, mine := Mine, theirs := Theirs0}, {Wx = #{catching_up := Cx}, Ev}) ->
              case {Theirs0, Known} of
                  {undefined, #{N := K}} ->
                      {Wx#{catching_up := Cx#{N := CU#{theirs := K}}}, Ev};
                  {undefined, _} -> {Wx, Ev};
                  {_, #{N := K}} ->
                      case hm_vv:leq(Mine, K) andalso hm_vv:leq(Theirs0, Delivered) of
                          true ->
                              Info = #{table => Tab, peer => N, duration_ms => Mono - Since,
                                       ops_received => gain(Mine, Delivered, Self),
                                       ops_sent => gain(Theirs0, K, N),
                                       conflicts_resolved =>
                                           hm_ec_table:conflicts(T) - maps:get(conflicts, CU)},
                              {Wx#{catching_up := maps:remove(N, Cx),
                                   last_heal := Info#{time => Sys}},
                               [{catch_up, Info} | Ev]};
                          false -> {Wx, Ev}
                      end;
                  _ -> {Wx, Ev}
              end
      end, {W, []}, C).

%% Operations of origins on other nodes than `Node' in `To' and not in `From'.
gain(From, To, Node) ->
    lists:sum([max(0, Seq - hm_vv:get(R, From)) || {R = {RN, _}, Seq} <- hm_vv:to_list(To),
                                                   RN =/= Node]).

delivered(T) -> hm_tcsb:delivered(hm_ec_table:tcsb(T)).

node_of(T) -> element(1, hm_tcsb:self(hm_ec_table:tcsb(T))).

%% @doc The copy's status for a cluster-wide view: {@link hm_ec_table:info/2}, the digest of
%% its rows (taken with the delivered vector, in the same step), what this watch knows:
%% `partitions_seen', `last_partition', `catching_up' (members whose catch-up is not done),
%% `last_heal', `last_state_transfer'. Reads every row of the copy, unless it has delivered
%% nothing since the last report (only operations change the rows: the digest is kept with
%% the delivered vector it was taken at, and a ready copy's rows are a function of it).
-spec report([node()], hm_ec_table:state(), state()) -> {map(), state()}.
report(Up, T, W = #{partitions := P, last_partition := LP, catching_up := C, last_heal := LH,
                    last_state_transfer := LT, digest := Cached}) ->
    Info = #{delivered := V} = hm_ec_table:info(Up, T),
    Digest = case {Cached, hm_ec_table:status(T)} of
                 {{V, D}, ready} -> D;
                 _ -> digest(hm_ec_table:rows(T))
             end,
    {Info#{digest => Digest, partitions_seen => P, last_partition => LP,
           catching_up => lists:sort(maps:keys(C)), last_heal => LH,
           last_state_transfer => LT},
     W#{digest := {V, Digest}}}.

%% @doc An order-independent digest of rows: the sum, modulo 2^128, of each row's MD5 (of
%% its deterministic external term format), as 32 lowercase hex digits. Equal sets of rows
%% give equal digests on every node; a duplicate row counts twice.
-spec digest([tuple()]) -> binary().
digest(Rows) ->
    Sum = lists:foldl(fun(R, Acc) ->
                              <<H:128>> = erlang:md5(term_to_binary(R, [deterministic])),
                              (Acc + H) band ((1 bsl 128) - 1)
                      end, 0, Rows),
    list_to_binary(io_lib:format("~32.16.0b", [Sum])).
